import { CloudFormationClient } from '@aws-sdk/client-cloudformation';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { createCiProviders } from '../ci';
import { AwsCaller } from '../shared/aws-call';
import { PRODUCTION_CLIENT_OPTIONS, productionClients, providersOnce } from '../shared/clients';
import { LAMBDA_ENV, type Provider } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createDrainHandlers } from './handler';

const clients = productionClients();
const truncatedLists = new Set<Provider>();
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
    lambda: new LambdaClient(PRODUCTION_CLIENT_OPTIONS),
    events: new EventBridgeClient(PRODUCTION_CLIENT_OPTIONS),
    cloudformation: new CloudFormationClient(PRODUCTION_CLIENT_OPTIONS),
    aws: new AwsCaller({ pacer: new Pacer() }),
    loadConfig: () => loadFleetConfig(clients.ssm),
    providers: providersOnce((config) => createCiProviders(config, { ssm: clients.ssm, onListTruncated: (provider) => truncatedLists.add(provider) })),
    truncatedLists,
    sources: { eventSourceMappings: list(LAMBDA_ENV.drainEventSourceMappings), schedules: list(LAMBDA_ENV.drainSchedules) },
    settings: { quietMs: seconds(LAMBDA_ENV.drainQuietSeconds), deadlineMs: seconds(LAMBDA_ENV.drainDeadlineSeconds) },
  }));

/** The drain's onEvent and isComplete, for the CDK provider framework (one bundle, two functions). */
export const onEvent: ReturnType<typeof createDrainHandlers>['onEvent'] = (event) => handlers().onEvent(event);
export const isComplete: ReturnType<typeof createDrainHandlers>['isComplete'] = (event) => handlers().isComplete(event);
