import { gitLabPoolsForProject, type FleetConfig, type PoolConfig, type Provider } from './contract';

/**
 * The pools `matchPool` may choose from for a job: for a GitLab job of a known project, the
 * GitLab pools whose scope can serve that project (a project pool only its own project's jobs;
 * contract gitlab-scope.ts); every pool otherwise. The webhook, scale-up and the reconciler
 * all narrow with this, so the three route a job alike.
 */
export function candidatePools(config: Pick<FleetConfig, 'gitlab' | 'pools'>, job: { readonly provider: Provider; readonly projectId?: number | undefined }): readonly PoolConfig[] {
  if (job.provider !== 'gitlab' || !config.gitlab || job.projectId === undefined) return config.pools;
  return gitLabPoolsForProject(config.gitlab, config.pools, job.projectId);
}
