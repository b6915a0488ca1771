import { GitLabRunnerType, GitLabWebhookOwner, type GitLabConnectionConfig, type GitLabWebhookConfig, type PoolConfig } from './fleet-config';

/**
 * Where a GitLab pool registers its runners: `POST /user/runners` with `runner_type` and, for a
 * group or project runner, `group_id` or `project_id` (doc/api/users.md, "Create a runner linked
 * to a user"). A pool's own `gitlabGroupId`/`gitlabProjectId` wins over the connection's
 * `runnerType`/`scopeId`, so a fleet that sets neither keeps one scope for every pool.
 */
export interface GitLabRunnerScope {
  readonly runnerType: GitLabRunnerType;
  /** The group's or project's id; absent for instance runners. */
  readonly scopeId?: number;
}

type Connection = Pick<GitLabConnectionConfig, 'runnerType' | 'scopeId'>;
type ScopedPool = Pick<PoolConfig, 'provider' | 'gitlabGroupId' | 'gitlabProjectId'>;
type PoolScope = Pick<PoolConfig, 'gitlabGroupId' | 'gitlabProjectId'>;

/** The scope a GitLab pool's runners are created in. */
export function gitLabScopeOf(gitlab: Connection, pool: PoolScope): GitLabRunnerScope {
  if (pool.gitlabProjectId !== undefined) return { runnerType: GitLabRunnerType.PROJECT, scopeId: pool.gitlabProjectId };
  if (pool.gitlabGroupId !== undefined) return { runnerType: GitLabRunnerType.GROUP, scopeId: pool.gitlabGroupId };
  return gitlab.runnerType === GitLabRunnerType.INSTANCE ? { runnerType: GitLabRunnerType.INSTANCE } : { runnerType: gitlab.runnerType, ...(gitlab.scopeId === undefined ? {} : { scopeId: gitlab.scopeId }) };
}

/** One key per scope: `group_type:12`, `project_type:7`, `instance_type`. */
export function gitLabScopeKey(scope: GitLabRunnerScope): string {
  return scope.runnerType === GitLabRunnerType.INSTANCE ? scope.runnerType : `${scope.runnerType}:${scope.scopeId ?? '?'}`;
}

/**
 * Every scope the fleet's GitLab pools register in, each once, in pool order: the sweeps, the
 * drain and the reconciler walk these, not the pools, so two pools of one group cost one list.
 */
export function fleetGitLabScopes(gitlab: Connection, pools: readonly ScopedPool[]): GitLabRunnerScope[] {
  const out = new Map<string, GitLabRunnerScope>();
  for (const pool of pools) {
    if (pool.provider !== 'gitlab') continue;
    const scope = gitLabScopeOf(gitlab, pool);
    if (!out.has(gitLabScopeKey(scope))) out.set(gitLabScopeKey(scope), scope);
  }
  return [...out.values()];
}

/**
 * Whether a pool's runners can take a job of this project, as far as the Job Hook tells without
 * an API call: a project runner only its own project's jobs; a group runner any project's (the
 * hook does not carry the project's group ancestry: GitLab's assignment decides, docs/gitlab.md);
 * an instance runner every project's.
 */
export function poolServesProject(gitlab: Connection, pool: ScopedPool, projectId: number): boolean {
  const scope = gitLabScopeOf(gitlab, pool);
  return scope.runnerType !== GitLabRunnerType.PROJECT || scope.scopeId === projectId;
}

/** The GitLab pools that can serve a job of this project (the candidates `matchPool` chooses from). */
export function gitLabPoolsForProject<P extends ScopedPool>(gitlab: Connection, pools: readonly P[], projectId: number): P[] {
  return pools.filter((p) => p.provider === 'gitlab' && poolServesProject(gitlab, p, projectId));
}

/**
 * The webhooks whose failed events the reconciler resends, each once: the connection's, then
 * each pool's `gitlabWebhookId`, owned by the pool's group or project.
 */
export function fleetGitLabWebhooks(gitlab: Pick<GitLabConnectionConfig, 'runnerType' | 'scopeId' | 'webhook'>, pools: readonly (ScopedPool & Pick<PoolConfig, 'gitlabWebhookId'>)[]): GitLabWebhookConfig[] {
  const out = new Map<string, GitLabWebhookConfig>();
  const add = (w: GitLabWebhookConfig) => {
    const key = `${w.owner}:${w.ownerId}:${w.hookId}`;
    if (!out.has(key)) out.set(key, w);
  };
  if (gitlab.webhook) add(gitlab.webhook);
  for (const pool of pools) {
    if (pool.provider !== 'gitlab' || pool.gitlabWebhookId === undefined) continue;
    const owner = webhookOwnerOf(gitLabScopeOf(gitlab, pool));
    if (owner) add({ ...owner, hookId: pool.gitlabWebhookId });
  }
  return [...out.values()];
}

/** The owner of a scope's own webhook: its group or project; none for instance runners. */
export function webhookOwnerOf(scope: GitLabRunnerScope): Omit<GitLabWebhookConfig, 'hookId'> | undefined {
  if (scope.scopeId === undefined) return undefined;
  if (scope.runnerType === GitLabRunnerType.GROUP) return { owner: GitLabWebhookOwner.GROUP, ownerId: scope.scopeId };
  if (scope.runnerType === GitLabRunnerType.PROJECT) return { owner: GitLabWebhookOwner.PROJECT, ownerId: scope.scopeId };
  return undefined;
}
