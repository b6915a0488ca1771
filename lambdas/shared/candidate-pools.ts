import { gitLabPoolsForProject, type FleetConfig, type PoolConfig, type Provider } from './contract';
import { poolsServing } from './match-pool';

/**
 * The pools `matchPool` may choose from for a job: for a GitHub job, the pools whose
 * organisation or repositories hold its repository (contract github-scope.ts); for a GitLab job
 * of a known project, the GitLab pools whose scope can serve that project (a project pool only
 * its own project's jobs; contract gitlab-scope.ts); every pool otherwise. The webhook,
 * scale-up and the reconcilers all narrow with this, so they route a job alike.
 */
export function candidatePools(
  config: Pick<FleetConfig, 'github' | 'gitlab' | 'pools'>,
  job: { readonly provider: Provider; readonly owner?: string; readonly project?: string; readonly projectId?: number | undefined },
): readonly PoolConfig[] {
  if (job.provider === 'github') return config.github && job.owner !== undefined && job.project !== undefined ? poolsServing(config, job.provider, job.owner, job.project) : config.pools;
  if (!config.gitlab || job.projectId === undefined) return config.pools;
  return gitLabPoolsForProject(config.gitlab, config.pools, job.projectId);
}
