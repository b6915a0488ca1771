import { createCiProviders } from '../ci';
import { AwsCaller } from '../shared/aws-call';
import { productionClients, providersOnce } from '../shared/clients';
import type { Provider } from '../shared/contract';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createScaleDownHandler } from './handler';

const clients = productionClients();
const truncatedLists = new Set<Provider>();

/** The scale-down Lambda, on a schedule. */
export const handler = createScaleDownHandler({
  ec2: clients.ec2,
  ssm: clients.ssm,
  aws: new AwsCaller({ pacer: new Pacer() }),
  loadConfig: () => loadFleetConfig(clients.ssm),
  providers: providersOnce((config) => createCiProviders(config, { ssm: clients.ssm, onListTruncated: (provider) => truncatedLists.add(provider) })),
  truncatedLists,
});
