import { CloudFormationClient } from '@aws-sdk/client-cloudformation';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { AwsCaller } from '../shared/aws-call';
import { createCiProviders } from '../ci';
import { installationCallerOf, scaleSetApiAt } from '../ci/scale-set';
import { PRODUCTION_CLIENT_OPTIONS, productionClients, providersOnce, requiredEnv } from '../shared/clients';
import { LAMBDA_ENV } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createScaleSetResourceHandler, type ScaleSetApiFactory } from './handler';

const clients = productionClients();

const providers = providersOnce((config) => createCiProviders(config, { ssm: clients.ssm }));

// The scale-set client of a scope, its registration tokens minted by the fleet's GitHub Apps.
const scaleSetApiFor: ScaleSetApiFactory = (config, scope) => {
  const github = installationCallerOf(providers(config).github);
  return scaleSetApiAt(config, scope, { github });
};

/** The scale-set resource's onEvent, for the CDK provider framework. */
export const handler = createScaleSetResourceHandler({
  cloudformation: new CloudFormationClient(PRODUCTION_CLIENT_OPTIONS),
  aws: new AwsCaller({ pacer: new Pacer() }),
  ssm: clients.ssm,
  dynamodb: new DynamoDBClient(PRODUCTION_CLIENT_OPTIONS),
  tableName: requiredEnv(LAMBDA_ENV.jobRecordTable),
  loadConfig: () => loadFleetConfig(clients.ssm),
  scaleSetApiFor,
});
