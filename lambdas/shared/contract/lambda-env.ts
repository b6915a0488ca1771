/** Environment variable names the constructs set on the Lambdas and the Lambdas read. */
export const LAMBDA_ENV = {
  /** The FleetConfig as JSON, when it fits the environment (Lambda allows 4 KB in all). */
  fleetConfig: 'FLEET_CONFIG',
  /** Name of the SSM String parameter holding the FleetConfig, when it does not. */
  fleetConfigParameter: 'FLEET_CONFIG_PARAMETER',
  /** URL of the jobs queue (FIFO: group = job id, deduplication = delivery id). */
  jobsQueueUrl: 'JOBS_QUEUE_URL',
} as const;
