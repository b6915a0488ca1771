import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { createCiProviders } from '../ci';
import { AwsCaller } from '../shared/aws-call';
import { PRODUCTION_CLIENT_OPTIONS, productionClients, providersOnce, requiredEnv } from '../shared/clients';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { isScaleSetDemand, JOB_RETRY_DEFAULTS, LAMBDA_ENV, type JobRetryOptions, type ScaleSetDemand, type ScaleSetDemandResult } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createScaleUpHandler } from './handler';
import { createScaleSetDemandHandler } from './scale-set-handler';
import { productionScaleSetApis } from '../scale-set-listener/api';
import { DynamoJobRecords } from './job-record';
import { DynamoLaunchTickets } from '../shared/launch-tickets';


/** The construct's retry settings (its jobRetryAfter and jobRetryLimit props); the defaults when absent. */
function retryOptions(): JobRetryOptions {
  const raw = process.env[LAMBDA_ENV.jobRetryOptions];
  return raw ? { ...JOB_RETRY_DEFAULTS, ...(JSON.parse(raw) as Partial<JobRetryOptions>) } : JOB_RETRY_DEFAULTS;
}

const clients = productionClients();
// One pacer per container: its buckets follow the documented account rates.
const aws = new AwsCaller({ pacer: new Pacer() });
const dynamodb = new DynamoDBClient(PRODUCTION_CLIENT_OPTIONS);

const providers = providersOnce((config) => createCiProviders(config, { ssm: clients.ssm }));
const deps = {
  ...clients,
  aws,
  loadConfig: () => loadFleetConfig(clients.ssm),
  providers,
  queueUrl: requiredEnv(LAMBDA_ENV.jobsQueueUrl),
  deadLetterQueueUrl: requiredEnv(LAMBDA_ENV.deadLetterQueueUrl),
  instanceArnPrefix: requiredEnv(LAMBDA_ENV.instanceArnPrefix),
  jobRecords: new DynamoJobRecords(aws, dynamodb, requiredEnv(LAMBDA_ENV.jobRecordTable)),
  launchTickets: new DynamoLaunchTickets(aws, dynamodb, requiredEnv(LAMBDA_ENV.jobRecordTable)),
  options: { retry: retryOptions() },
};
const queue = createScaleUpHandler(deps);
const demand = createScaleSetDemandHandler({ ...deps, scaleSetApi: productionScaleSetApis(providers) });

/**
 * The scale-up Lambda: SQS event source of the jobs queue (ReportBatchItemFailures on), and
 * the scale-set listener's synchronous invocation with a `ScaleSetDemand`.
 */
export async function handler(event: SQSEvent | ScaleSetDemand, context?: Context): Promise<SQSBatchResponse | ScaleSetDemandResult> {
  // The demand path stops starting slots when the invocation's time runs low (scale-set-serve.ts `scaleSetSlotReserveMs`).
  return isScaleSetDemand(event) ? demand(event, context) : queue(event);
}
