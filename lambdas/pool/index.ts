import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { AwsCaller } from '../shared/aws-call';
import { LAMBDA_ENV } from '../shared/contract';
import { DynamoLaunchTickets } from '../shared/launch-tickets';
import { PRODUCTION_CLIENT_OPTIONS, productionClients, requiredEnv } from '../shared/clients';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createPoolHandler } from './handler';

const clients = productionClients();
const aws = new AwsCaller({ pacer: new Pacer() });


/** The pool Lambda, on a schedule. */
export const handler = createPoolHandler({
  ec2: clients.ec2,
  ssm: clients.ssm,
  aws,
  loadConfig: () => loadFleetConfig(clients.ssm),
  launchTickets: new DynamoLaunchTickets(aws, new DynamoDBClient(PRODUCTION_CLIENT_OPTIONS), requiredEnv(LAMBDA_ENV.jobRecordTable)),
});
