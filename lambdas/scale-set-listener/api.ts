import type { SSMClient } from '@aws-sdk/client-ssm';
import type { FleetConfig, PoolConfig, ScaleSetApi } from '../shared/contract';

/**
 * The scale-set client of a pool's scope, as the listener and scale-up take it: built per
 * pool (its scope's App installation), cached by the implementation as it needs.
 */
export type ScaleSetApiFactory = (config: FleetConfig, pool: PoolConfig) => ScaleSetApi;

/**
 * The production factory: the client of `lambdas/ci/scale-set/` (written beside this part, on
 * its own branch). This branch has no client, so the binding below refuses at the listener's
 * cold start, naming what is missing; at merge this one line becomes
 * `export { scaleSetApiFor } from '../ci/scale-set';` (that factory takes the SSM client for
 * the App credentials as its third argument, as index.ts passes it).
 */
export const scaleSetApiFor: (config: FleetConfig, pool: PoolConfig, deps: { readonly ssm: SSMClient }) => ScaleSetApi = () => {
  throw new Error('this build has no scale-set client (lambdas/ci/scale-set/)');
};
