import { Provider } from './boot';
import type { FleetConfig, PoolConfig } from './fleet-config';
import { githubPoolScope } from './github-scope';

/**
 * Which pools are runner scale sets and where each scale set lives (docs/scale-set.md): read
 * by the construct (the listener, the scale-set resource, whether a webhook is needed), the
 * scale-set resource's handler, and the job paths that leave scale-set jobs alone.
 */

/** Where a scale set lives at GitHub: an organisation or one repository ("owner/repo"). */
export interface ScaleSetScope {
  readonly organization?: string;
  readonly repository?: string;
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
    const scope = githubPoolScope(github, p);
    const where = scope.organization !== undefined ? { organization: scope.organization } : { repository: scope.repositories[0]! };
    return [{ pool: p.name, name: p.scaleSet!.name, runnerGroup: p.scaleSet!.runnerGroup, ...where }];
  });
}
