/**
 * Metric names and dimensions, in CloudWatch embedded metric format from the Lambdas
 * and from the instance log metric filter. Alarms are built from these names.
 */
export const DEFAULT_METRIC_NAMESPACE = 'CdkWarmRunners';

export const METRIC_NAMES = {
  /** Deliveries the webhook queued (fleet-wide and per pool). */
  jobsReceived: 'JobsReceived',
  /** Jobs scale-up took from the queue for the first time (redeliveries and wait copies excluded). */
  jobsDequeued: 'JobsDequeued',
  activations: 'WarmActivations',
  coldLaunches: 'ColdLaunches',
  fallbacks: 'Fallbacks',
  lostClaims: 'LostClaims',
  jobsWaitingForCapacity: 'JobsWaitingForCapacity',
  jobsFailed: 'JobsFailed',
  deadLettered: 'JobsDeadLettered',
  evictions: 'Evictions',
  parked: 'ParkedInstances',
  priming: 'PrimingInstances',
  target: 'TargetInstances',
  /** Instances serving a job (activated warm or launched cold), per pool. */
  active: 'ActiveInstances',
  activationDuration: 'ActivationDuration',
  activationLatency: 'ActivationLatency',
  sweeps: 'Sweeps',
  /** A CI runner list stopped at its page cap: the sweep saw only part of the fleet's runners. */
  runnerListTruncated: 'RunnerListTruncated',
} as const;
export type MetricName = (typeof METRIC_NAMES)[keyof typeof METRIC_NAMES];

export const METRIC_DIMENSIONS = {
  pool: 'Pool',
  reason: 'Reason',
} as const;
