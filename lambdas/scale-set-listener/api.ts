import { installationCallerOf, scaleSetApiFor } from '../ci/scale-set';
import type { CiProvider, FleetConfig, PoolConfig, Provider, ScaleSetApi } from '../shared/contract';

/**
 * The scale-set client of a pool's scope, as the listener and scale-up take it: built per
 * pool (its scope's App installation).
 */
export type ScaleSetApiFactory = (config: FleetConfig, pool: PoolConfig) => ScaleSetApi;

/**
 * The production factory: the client of `lambdas/ci/scale-set/`, its registration tokens
 * minted through the fleet's GitHub provider. One client per pool for the container's
 * FleetConfig (the client keeps its admin token until shortly before it expires); a reloaded
 * config starts the cache over, so it holds one entry per pool at most.
 */
export function productionScaleSetApis(providers: (config: FleetConfig) => Partial<Record<Provider, CiProvider>>): ScaleSetApiFactory {
  let cache: { config: FleetConfig; apis: Map<string, ScaleSetApi> } | undefined;
  return (config, pool) => {
    if (cache?.config !== config) cache = { config, apis: new Map() };
    let api = cache.apis.get(pool.name);
    if (api === undefined) {
      api = scaleSetApiFor(config, pool, { github: installationCallerOf(providers(config).github) });
      cache.apis.set(pool.name, api);
    }
    return api;
  };
}
