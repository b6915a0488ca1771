import { REUSE_DEFAULTS, REUSE_SCOPE_OF, type PoolReuseConfig } from '../lambdas/shared/contract';
import type { RunnerPoolProps } from './props';

/**
 * A pool's reuse props with the contract's defaults, as the boot script is rendered with them
 * (the same defaults buildFleetConfig gives the Lambdas).
 */
export function poolReuseConfig(pool: RunnerPoolProps): PoolReuseConfig | undefined {
  const r = pool.reuse;
  if (!r) return undefined;
  return {
    scope: r.scope ?? REUSE_SCOPE_OF[pool.provider],
    maxJobs: r.maxJobs ?? REUSE_DEFAULTS.maxJobs,
    maxAgeSeconds: r.maxAge?.toSeconds() ?? REUSE_DEFAULTS.maxAgeSeconds,
    cacheDirectories: [...(r.cacheDirectories ?? [])],
  };
}
