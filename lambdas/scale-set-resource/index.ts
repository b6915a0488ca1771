import { CloudFormationClient } from '@aws-sdk/client-cloudformation';
import { AwsCaller } from '../shared/aws-call';
import { PRODUCTION_CLIENT_OPTIONS, productionClients } from '../shared/clients';
import { loadFleetConfig } from '../shared/fleet-config-source';
import { Pacer } from '../shared/pacing';
import { createScaleSetResourceHandler, type ScaleSetApiFactory } from './handler';

const clients = productionClients();

// MERGE SEAM (issue 26): replace with `scaleSetApiFor` from '../ci/scale-set' (part P's client)
// once it is merged; until then a deploy with a scale-set pool fails here, naming the cause.
const scaleSetApiFor: ScaleSetApiFactory = () => {
  throw new Error('the scale-set client (lambdas/ci/scale-set) is not wired into this build');
};

/** The scale-set resource's onEvent, for the CDK provider framework. */
export const handler = createScaleSetResourceHandler({
  cloudformation: new CloudFormationClient(PRODUCTION_CLIENT_OPTIONS),
  aws: new AwsCaller({ pacer: new Pacer() }),
  loadConfig: () => loadFleetConfig(clients.ssm),
  scaleSetApiFor,
});
