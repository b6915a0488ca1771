import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { createCiProviders } from '../ci';
import { AwsCaller } from '../shared/aws-call';
import { PRODUCTION_CLIENT_OPTIONS, productionClients, providersOnce, requiredEnv } from '../shared/clients';
import { LAMBDA_ENV } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { productionScaleSetApis } from './api';
import { CAPACITY_CALL, requestCapacity } from './capacity';
import { createListenerHandler } from './handler';
import { DynamoScaleSetLeases } from './lease';

const clients = productionClients();
const aws = new AwsCaller({ pacer: new Pacer() });
// Scale-up's answer comes when the demand is served: the socket waits past the call's bound (capacity.ts).
const lambda = new LambdaClient({ ...PRODUCTION_CLIENT_OPTIONS, requestHandler: { connectionTimeout: 2_000, requestTimeout: CAPACITY_CALL.timeoutMs + 5_000 } });
const scaleUp = requiredEnv(LAMBDA_ENV.scaleUpFunctionName);

/** The scale-set listener Lambda: an EventBridge schedule, every minute. */
export const handler = createListenerHandler({
  ec2: clients.ec2,
  aws,
  loadConfig: () => loadFleetConfig(clients.ssm),
  scaleSetApi: productionScaleSetApis(providersOnce((config) => createCiProviders(config, { ssm: clients.ssm }))),
  leases: new DynamoScaleSetLeases(aws, new DynamoDBClient(PRODUCTION_CLIENT_OPTIONS), requiredEnv(LAMBDA_ENV.jobRecordTable)),
  requestCapacity: (demand) => requestCapacity(aws, lambda, scaleUp, demand),
});
