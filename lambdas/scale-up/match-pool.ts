import type { FleetConfig, Provider } from '../shared/contract';

/**
 * The pool for a job whose labels scale-up had to resolve itself (GitLab jobs queued with
 * `labelsResolved: false`). exact: the job's labels equal the pool's; subset: every label of
 * the job is one of the pool's (how GitLab matches runner tags). GitHub's implicit
 * "self-hosted" label is ignored. An untagged GitLab job matches a pool with runUntagged.
 */
export function matchPool(config: FleetConfig, provider: Provider, labels: readonly string[]): string | undefined {
  const asked = new Set(labels.filter((l) => !(provider === 'github' && l.toLowerCase() === 'self-hosted')).map((l) => l.toLowerCase()));
  for (const pool of config.pools) {
    if (pool.provider !== provider) continue;
    const offered = new Set(pool.labels.map((l) => l.toLowerCase()));
    if (asked.size === 0) {
      if (pool.runUntagged) return pool.name;
      continue;
    }
    const within = [...asked].every((l) => offered.has(l));
    if (within && (pool.labelMatch === 'subset' || asked.size === offered.size)) return pool.name;
  }
  return undefined;
}
