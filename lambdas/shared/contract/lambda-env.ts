/** Environment variable names the constructs set on the Lambdas and the Lambdas read. */
export const LAMBDA_ENV = {
  /** The FleetConfig as JSON, when it fits the environment (Lambda allows 4 KB in all). */
  fleetConfig: 'FLEET_CONFIG',
  /** Name of the SSM String parameter holding the FleetConfig, when it does not. */
  fleetConfigParameter: 'FLEET_CONFIG_PARAMETER',
  /** URL of the jobs queue (FIFO: group = job id, deduplication = delivery id). */
  jobsQueueUrl: 'JOBS_QUEUE_URL',
  /**
   * URL of the jobs queue's dead-letter queue (FIFO). Scale-up sends a message there itself
   * when it can never be served (malformed, unknown pool, waited past the maximum age);
   * real failures reach it through the queue's redrive policy.
   */
  deadLetterQueueUrl: 'DEAD_LETTER_QUEUE_URL',
  /**
   * Scale-up: `arn:<partition>:ec2:<region>:<account>:instance/`, from which it builds the
   * instance ARN tagged on each runner config parameter (`PARAMETER_INSTANCE_ARN_TAG`).
   */
  instanceArnPrefix: 'INSTANCE_ARN_PREFIX',
  /** Drain: the UUIDs of the event source mappings to disable when the stack is deleted (comma-separated). */
  drainEventSourceMappings: 'DRAIN_EVENT_SOURCE_MAPPINGS',
  /** Drain: the names of the EventBridge rules (schedules) to disable (comma-separated). */
  drainSchedules: 'DRAIN_SCHEDULES',
  /** Drain: seconds after the stop during which an earlier invocation may still launch (the longest function timeout). */
  drainQuietSeconds: 'DRAIN_QUIET_SECONDS',
  /** Drain: seconds after the stop at which the drain fails the delete, naming what is left. */
  drainDeadlineSeconds: 'DRAIN_DEADLINE_SECONDS',
  /** Scale-up and pool: the DynamoDB table of per-job records (one item per job: which delivery serves it) and launch tickets. */
  jobRecordTable: 'JOB_RECORD_TABLE',
  /** Scale-up: `JobRetryOptions` as JSON; absent: `JOB_RETRY_DEFAULTS`. */
  jobRetryOptions: 'JOB_RETRY_OPTIONS',
  /** Reconciler: its limits as JSON (redeliverLimit, runReadLimit, ...); absent: the defaults. */
  reconcileOptions: 'RECONCILE_OPTIONS',
  /**
   * Webhook: the fleet's metric namespace, for the metric of a request it answers 5xx before the
   * fleet config (which names the namespace too) could be read.
   */
  metricNamespace: 'METRIC_NAMESPACE',
  /** Release resolver: `RunnerReleaseSources` as JSON; absent: `DEFAULT_RUNNER_RELEASE_SOURCES`. */
  runnerReleaseSources: 'RUNNER_RELEASE_SOURCES',
  /** Scale-set listener: the name of the scale-up function it invokes synchronously with a `ScaleSetDemand`. */
  scaleUpFunctionName: 'SCALE_UP_FUNCTION_NAME',
  /**
   * Scale-set listener: its own timeout in seconds (the construct's), so it plans its polls to
   * end shortly before it; each invocation also reads the time left from its context.
   */
  listenerTimeoutSeconds: 'LISTENER_TIMEOUT_SECONDS',
} as const;
