import { Provider } from './boot';
import type { FleetConfig, PoolConfig } from './fleet-config';
import { githubPoolScope, type GitHubScopeFields } from './github-scope';

/**
 * Which pools are runner scale sets and where each scale set lives (docs/scale-set.md): read
 * by the construct (the listener, the scale-set resource, whether a webhook is needed), the
 * scale-set resource's handler, and the job paths that leave scale-set jobs alone.
 */

/** Where a scale set lives at GitHub: an organisation or one repository ("owner/repo"); exactly one is set. */
export interface ScaleSetScope {
  readonly organization?: string;
  readonly repository?: string;
}

/**
 * Where a scale-set pool's scale set lives (its own scope or the connection's): the client
 * exchanges its token there, and its runners are runners of that organisation or repository.
 * A scale set belongs to an organisation or to ONE repository (the client also knows
 * enterprises; the checks refuse a scale-set pool of an enterprise or of several repositories,
 * fleet-config.ts): throws on such a pool.
 */
export function scaleSetScope(github: GitHubScopeFields, pool: GitHubScopeFields & { readonly name: string }): ScaleSetScope {
  const scope = githubPoolScope(github, pool);
  if (scope.enterprise !== undefined) throw new Error(`pool "${pool.name}": a scale set cannot be registered at an enterprise; name an organisation or one repository`);
  if (scope.organization !== undefined) return { organization: scope.organization };
  const [only, ...more] = scope.repositories;
  if (only === undefined || more.length > 0) throw new Error(`pool "${pool.name}": a scale set is registered at an organisation or at ONE repository (the pool names ${scope.repositories.length})`);
  return { repository: only };
}

/**
 * One pool's scale set: its pool, name, runner group and scope. No labels: the scale set
 * carries its name as its only label, so GitHub assigns it exactly the jobs that name it and
 * the webhook pools keep every other job (match-pool.ts; docs/scale-set.md, "Which jobs").
 */
export interface ScaleSetEntry extends ScaleSetScope {
  readonly pool: string;
  readonly name: string;
  readonly runnerGroup: string;
}

/** Whether GitHub assigns the pool's jobs through a scale set (the webhook and the reconciler leave them alone). */
export function isScaleSetPool(pool: Pick<PoolConfig, 'provider' | 'scaleSet'>): boolean {
  return pool.provider === Provider.GITHUB && pool.scaleSet !== undefined;
}

/** Whether some pool's jobs come from webhooks (a GitLab pool, a GitHub pool that is no scale set). */
export function needsWebhooks(pools: readonly Pick<PoolConfig, 'provider' | 'scaleSet'>[]): boolean {
  return pools.some((p) => !isScaleSetPool(p));
}

/** The scale sets a FleetConfig names, in pool order (the checks made each scope an organisation or one repository). */
export function scaleSetEntries(config: Pick<FleetConfig, 'github' | 'pools'>): ScaleSetEntry[] {
  const github = config.github;
  if (!github) return [];
  return config.pools.flatMap((p) => {
    if (!isScaleSetPool(p)) return [];
    return [{ pool: p.name, name: p.scaleSet!.name, runnerGroup: p.scaleSet!.runnerGroup, ...scaleSetScope(github, p) }];
  });
}
