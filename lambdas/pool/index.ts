import { AwsCaller } from '../shared/aws-call';
import { productionClients } from '../shared/clients';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createPoolHandler } from './handler';

const clients = productionClients();

/** The pool Lambda, on a schedule. */
export const handler = createPoolHandler({
  ec2: clients.ec2,
  ssm: clients.ssm,
  aws: new AwsCaller({ pacer: new Pacer() }),
  loadConfig: () => loadFleetConfig(clients.ssm),
});
