import { createCiProviders } from '../ci';
import { AwsCaller } from '../shared/aws-call';
import { productionClients, providersOnce } from '../shared/clients';
import { LAMBDA_ENV } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createDrainHandlers } from './handler';
import { ScalingApi } from './scaling-api';

const clients = productionClients();
const list = (name: string) => (process.env[name] ?? '').split(',').filter((s) => s !== '');
const seconds = (name: string) => {
  const value = Number(process.env[name]);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`${name} must be a positive number of seconds, not "${process.env[name]}"`);
  return value * 1000;
};

// Built on first use: the environment is read when CloudFormation calls, not when the bundle loads.
let drain: ReturnType<typeof createDrainHandlers> | undefined;
const handlers = () =>
  (drain ??= createDrainHandlers({
    ec2: clients.ec2,
    ssm: clients.ssm,
    scaling: new ScalingApi({ region: process.env.AWS_REGION ?? '', credentials: clients.ec2.config.credentials, ...(process.env.AWS_ENDPOINT_URL ? { endpoint: process.env.AWS_ENDPOINT_URL } : {}) }),
    aws: new AwsCaller({ pacer: new Pacer() }),
    loadConfig: () => loadFleetConfig(clients.ssm),
    providers: providersOnce((config) => createCiProviders(config, { ssm: clients.ssm })),
    sources: { eventSourceMappings: list(LAMBDA_ENV.drainEventSourceMappings), schedules: list(LAMBDA_ENV.drainSchedules) },
    settings: { quietMs: seconds(LAMBDA_ENV.drainQuietSeconds), deadlineMs: seconds(LAMBDA_ENV.drainDeadlineSeconds) },
  }));

/** The drain's onEvent and isComplete, for the CDK provider framework (one bundle, two functions). */
export const onEvent: ReturnType<typeof createDrainHandlers>['onEvent'] = (event) => handlers().onEvent(event);
export const isComplete: ReturnType<typeof createDrainHandlers>['isComplete'] = (event) => handlers().isComplete(event);
