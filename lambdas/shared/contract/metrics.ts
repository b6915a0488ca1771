/**
 * Metric names and dimensions, in CloudWatch embedded metric format from the Lambdas
 * and from the instance log metric filter. Alarms are built from these names.
 */
export const DEFAULT_METRIC_NAMESPACE = 'CdkWarmRunners';

/**
 * The namespace of one fleet's metrics: one namespace per fleet prefix, so two fleets in one
 * account (which must have two prefixes) never feed or trip each other's alarms. A namespace
 * rather than a fleet dimension because every emitter already takes the namespace from one
 * place (the FleetConfig for the Lambdas, the construct for the instance log metric filter,
 * whose dimensions can only come from fields of the log line), and the alarms need no extra
 * dimension on every metric.
 */
export function fleetMetricNamespace(prefix: string): string {
  return `${DEFAULT_METRIC_NAMESPACE}/${prefix}`;
}

/**
 * The namespace rule of both places the fleet's metrics are published from: CloudWatch's
 * (PutMetricData: 1-255 characters of letters, digits and `.-_/#:` or space, at least one not
 * a space, not starting with "AWS/", which AWS reserves for its services) less ":", which the
 * instance log metric filter's namespace refuses (PutMetricFilter: pattern `[^:*$]*`), so a
 * namespace that passes here deploys.
 */
const METRIC_NAMESPACE_PATTERN = /^[a-zA-Z0-9.\-_/# ]{1,255}$/;

/** Returns an actionable message when `namespace` cannot be used, undefined when it can. */
export function metricNamespaceProblem(namespace: string): string | undefined {
  if (!METRIC_NAMESPACE_PATTERN.test(namespace) || namespace.trim() === '' || /^AWS\//.test(namespace)) {
    return `metricNamespace "${namespace}" must be 1-255 characters of letters, digits, ".", "-", "_", "/", "#" or space (not only spaces; no ":", which the instance log metric filter refuses), and must not begin with "AWS/" (reserved for AWS services)`;
  }
  return undefined;
}

/** The fleet's metric names, as the FleetConfig carries them (`metrics.names`). */
export interface MetricNames {
  /** Deliveries the webhook queued (fleet-wide and per pool). */
  readonly jobsReceived: string;
  /** Jobs scale-up took from the queue for the first time (redeliveries and wait copies excluded). */
  readonly jobsDequeued: string;
  /** Jobs served by a parked instance. */
  readonly activations: string;
  /** Jobs served by a cold launch. */
  readonly coldLaunches: string;
  /** Activations that fell back to a cold launch, by reason. */
  readonly fallbacks: string;
  /** Claims another scale-up invocation won first. */
  readonly lostClaims: string;
  /** Jobs re-queued because their pool was at maxRunners. */
  readonly jobsWaitingForCapacity: string;
  /** Jobs that got no runner after retries, by reason. */
  readonly jobsFailed: string;
  /** Jobs moved to the dead-letter queue. */
  readonly deadLettered: string;
  /** Warm instances the pool evicted, by reason. */
  readonly evictions: string;
  /** Parked instances, per pool. */
  readonly parked: string;
  /** Warm instances still priming, per pool. */
  readonly priming: string;
  /** The warm size in force, per pool. */
  readonly target: string;
  /** Instances serving a job (activated warm or launched cold), per pool. */
  readonly active: string;
  /** 1 while a pool backs off after its standbys failed to prime too often in a row, else 0, per pool. */
  readonly primeBackoff: string;
  /** Time scale-up spent on one activation. */
  readonly activationDuration: string;
  /** Seconds from the activation tag to the runner's start, from the boot log. */
  readonly activationLatency: string;
  /** Resources the scale-down sweep reclaimed, by reason. */
  readonly sweeps: string;
  /** A CI runner list stopped at its page cap: the sweep saw only part of the fleet's runners. */
  readonly runnerListTruncated: string;
  /** Jobs scale-up dropped because another delivery of the same job holds its per-job record, per pool. */
  readonly jobsDeduplicated: string;
  /** Per-job record writes that failed or stayed unresolved (the job was served without it), per pool. */
  readonly jobRecordErrors: string;
  /** Scale-set listener: polls of a pool's scale set that ended in an error (the lease, the session, a message not handled), per pool and `Reason`. */
  readonly scaleSetListenerErrors: string;
  /** Scale-set listener: messages handled and acknowledged, per pool. */
  readonly scaleSetMessages: string;
  /** Jobs that got another runner because they stayed queued after theirs was started (it took another job, or died), per pool. */
  readonly jobsRetried: string;
  /** Retries of a job that stopped, by reason: `not-queued` (cancelled, started or finished), `retries-exhausted`, `max-wait` (a runner could still take it at its maximum wait). */
  readonly jobRetriesStopped: string;
  /** Failed webhook deliveries the reconciler asked GitHub or GitLab to send again. */
  readonly redeliveries: string;
  /** Queued jobs the reconciler found at the CI provider and queued itself. */
  readonly jobsReconciled: string;
  /** What the reconciler's credential has left of its rate limit after its run (Credential dimension). */
  readonly ciRateLimitRemaining: string;
  /** GitHub: what an App has left of its most spent rate limit (its JWT's or an installation's) at its latest answer, per `AppId`. */
  readonly githubAppRateRemaining: string;
  /** GitHub: the limit that `githubAppRateRemaining` is a part of, per `AppId`. */
  readonly githubAppRateLimit: string;
  /**
   * GitHub Apps: the largest fraction of its limit any App has left (an App not yet heard from, or
   * past its reset, counts as whole): below the alarm's threshold every App is nearly spent.
   */
  readonly githubAppsBestRemainingFraction: string;
  /** Seconds from a job's origin to one stage of its latency ledger (contract ledger.ts), per pool and stage. */
  readonly jobStageSeconds: string;
  /** Reuse: jobs of a reusable pool served by a parked instance of their own affinity, per pool. */
  readonly reuseHits: string;
  /** Reuse: jobs of a reusable pool that found no parked instance of their affinity (served fresh or cold), per pool. */
  readonly reuseMisses: string;
  /** Reuse: activated instances the sweep's idle rule sent back to park instead of terminating, per pool. */
  readonly idleStops: string;
  /** Reuse: parked instances with an affinity (reused, carrying caches), per pool; a part of `parked`. */
  readonly parkedReused: string;
  /** Runner updates: a resolution of the newest runner release that failed or was refused (the last good one stays), per `Reason`. */
  readonly runnerReleaseProblems: string;
  /** Runner updates: whole days until GitHub refuses the runner version a GitHub pool installs (pinned or last resolved), per pool. */
  readonly runnerDaysLeft: string;
  /**
   * Webhook deliveries refused for their signature or token while they name the sender (a
   * signature or token header, or the provider's event header), per `Provider` and `Reason`
   * (`REFUSAL_REASONS`: `signature-mismatch`, `unsigned`, `secret-unusable`): a wrong or missing
   * secret refuses every delivery.
   */
  readonly webhookRefused: string;
  /** Requests to the webhook's URL with neither a signature or token nor the provider's event header (internet noise), per `Provider`. */
  readonly webhookUnsigned: string;
  /**
   * Jobs whose first copy scale-up took was the reconciler's (the webhook never queued them: a
   * lost or failed delivery), per pool. A job the reconciler finds again while it waits is not counted.
   */
  readonly lostDeliveries: string;
  /**
   * Webhook requests answered 5xx (the fleet config, a secret or the queue unreadable, a step too
   * slow): the sender redelivers later, or gives up. Fleet-wide; with the webhook's Lambda
   * `Errors` in `WebhookErrorAlarm`.
   */
  readonly webhookFailed: string;
  /** Reconciler: the steps of a run that failed (a repository's or project's read, a redelivery), fleet-wide, published every run. */
  readonly reconcileErrors: string;
}

/**
 * The `Reason` dimension of `WebhookRefused`, per kind of refusal (lambdas/webhook/verify.ts):
 * `unsigned`, no signature or token at all; `mismatch`, one that does not verify; `secret`, our
 * secret is missing or empty, so every delivery is refused.
 */
export const REFUSAL_REASONS = {
  unsigned: 'unsigned',
  mismatch: 'signature-mismatch',
  secret: 'secret-unusable',
} as const;

/**
 * The `GitHubAppsRateLimitLow` alarm fires when even the App with the most left has less than
 * this fraction of its rate limit (10%: about 500 requests of an installation's 5,000 an hour).
 */
export const GITHUB_APPS_LOW_FRACTION = 0.1;

export const METRIC_NAMES = {
  jobsReceived: 'JobsReceived',
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
  active: 'ActiveInstances',
  primeBackoff: 'PrimeBackoff',
  activationDuration: 'ActivationDuration',
  activationLatency: 'ActivationLatency',
  sweeps: 'Sweeps',
  runnerListTruncated: 'RunnerListTruncated',
  jobsDeduplicated: 'JobsDeduplicated',
  jobRecordErrors: 'JobRecordErrors',
  scaleSetListenerErrors: 'ScaleSetListenerErrors',
  scaleSetMessages: 'ScaleSetMessages',
  jobsRetried: 'JobsRetried',
  jobRetriesStopped: 'JobRetriesStopped',
  redeliveries: 'Redeliveries',
  jobsReconciled: 'JobsReconciled',
  ciRateLimitRemaining: 'CiRateLimitRemaining',
  githubAppRateRemaining: 'GitHubAppRateLimitRemaining',
  githubAppRateLimit: 'GitHubAppRateLimit',
  githubAppsBestRemainingFraction: 'GitHubAppsBestRemainingFraction',
  jobStageSeconds: 'JobStageSeconds',
  reuseHits: 'ReuseHits',
  reuseMisses: 'ReuseMisses',
  idleStops: 'IdleStops',
  parkedReused: 'ParkedReused',
  runnerReleaseProblems: 'RunnerReleaseProblems',
  runnerDaysLeft: 'RunnerDaysLeft',
  webhookRefused: 'WebhookRefused',
  webhookUnsigned: 'WebhookUnsigned',
  lostDeliveries: 'LostDeliveries',
  webhookFailed: 'WebhookFailed',
  reconcileErrors: 'ReconcileErrors',
} as const satisfies MetricNames;
export type MetricName = (typeof METRIC_NAMES)[keyof typeof METRIC_NAMES];

/** The dimension names of the fleet's metrics (`metrics.dimensions` of the FleetConfig). */
export interface MetricDimensions {
  /** The pool a figure belongs to. */
  readonly pool: string;
  /** Why something happened (an eviction, a fallback, a sweep, a failure). */
  readonly reason: string;
  /** The latency ledger's stage (contract ledger.ts). */
  readonly stage: string;
  /** The CI provider a webhook request was for (`github`, `gitlab`). */
  readonly provider: string;
  /** The GitHub App a rate-limit figure belongs to. */
  readonly appId: string;
}

export const METRIC_DIMENSIONS = {
  pool: 'Pool',
  reason: 'Reason',
  stage: 'Stage',
  provider: 'Provider',
  appId: 'AppId',
} as const satisfies MetricDimensions;
