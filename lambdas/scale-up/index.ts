import { createCiProviders } from '../ci';
import { AwsCaller } from '../shared/aws-call';
import { productionClients, providersOnce } from '../shared/clients';
import { LAMBDA_ENV } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createScaleUpHandler } from './handler';

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`environment variable ${name} is not set`);
  return value;
}

const clients = productionClients();

/** The scale-up Lambda: SQS event source of the jobs queue, ReportBatchItemFailures on. */
export const handler = createScaleUpHandler({
  ...clients,
  // One pacer per container: its buckets follow the documented account rates.
  aws: new AwsCaller({ pacer: new Pacer() }),
  loadConfig: () => loadFleetConfig(clients.ssm),
  providers: providersOnce((config) => createCiProviders(config, { ssm: clients.ssm })),
  queueUrl: required(LAMBDA_ENV.jobsQueueUrl),
  deadLetterQueueUrl: required(LAMBDA_ENV.deadLetterQueueUrl),
  instanceArnPrefix: required(LAMBDA_ENV.instanceArnPrefix),
});
