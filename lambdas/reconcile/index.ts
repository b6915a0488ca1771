import { createCiProviders } from '../ci';
import { AwsCaller } from '../shared/aws-call';
import { productionClients, providersOnce } from '../shared/clients';
import { LAMBDA_ENV } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createReconcileHandler, type ReconcileDeps } from './handler';

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`environment variable ${name} is not set`);
  return value;
}

/** The construct's reconcile props (redelivery limit, run reads), as JSON; absent: the defaults. */
function options(): ReconcileDeps['options'] {
  const raw = process.env[LAMBDA_ENV.reconcileOptions];
  if (!raw) return undefined;
  try {
    return JSON.parse(raw) as ReconcileDeps['options'];
  } catch {
    throw new Error(`environment variable ${LAMBDA_ENV.reconcileOptions} is not JSON`);
  }
}

const clients = productionClients();

/** The reconciler Lambda: run on a schedule (EventBridge), no input. */
export const handler = createReconcileHandler({
  sqs: clients.sqs,
  aws: new AwsCaller({ pacer: new Pacer() }),
  loadConfig: () => loadFleetConfig(clients.ssm),
  providers: providersOnce((config) => createCiProviders(config, { ssm: clients.ssm })),
  queueUrl: required(LAMBDA_ENV.jobsQueueUrl),
  options: options(),
});
