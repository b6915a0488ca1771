import { githubPoolScope, githubRunnerScopes, runnerIdKey, type GitHubConnectionConfig, type JobMessage, type PoolConfig } from '../shared/contract';

/** Where a runner registers: an organisation, one repository, or an enterprise. */
export type Scope =
  | { readonly kind: 'org'; readonly org: string }
  | { readonly kind: 'repo'; readonly owner: string; readonly repo: string }
  | { readonly kind: 'enterprise'; readonly enterprise: string };

/** Prefix of an enterprise runner's id: ":" is in no GitHub login, so no other id reads as one. */
const ENTERPRISE_ID_PREFIX = 'enterprise:';

/**
 * The scope a pool's runner for `job` registers at: the pool's enterprise, its organisation,
 * or the job's repository. A job outside the pool's organisation or repositories is refused:
 * a runner registered elsewhere could never take it.
 */
export function registrationScope(github: GitHubConnectionConfig, pool: PoolConfig, job: JobMessage): Scope {
  const scope = githubPoolScope(github, pool);
  const full = `${job.owner}/${job.project}`.toLowerCase();
  if (scope.organization !== undefined) {
    if (scope.organization.toLowerCase() !== job.owner.toLowerCase()) throw new Error(`job ${job.jobId} belongs to "${job.owner}", not to organisation "${scope.organization}" of pool "${pool.name}"`);
  } else if (!scope.repositories.some((r) => r.toLowerCase() === full)) {
    throw new Error(`repository "${job.owner}/${job.project}" is not one of pool "${pool.name}"'s repositories`);
  }
  if (scope.enterprise !== undefined) return { kind: 'enterprise', enterprise: scope.enterprise };
  if (scope.organization !== undefined) return { kind: 'org', org: scope.organization };
  return repoScope(scope.repositories.find((r) => r.toLowerCase() === full)!);
}

/** Every scope the fleet's runners are registered at, each once: the sweeps, the drain and the retry check list these. */
export function runnerScopes(github: GitHubConnectionConfig, pools: readonly PoolConfig[]): Scope[] {
  const s = githubRunnerScopes(github, pools);
  return [...s.organizations.map((org): Scope => ({ kind: 'org', org })), ...s.repositories.map(repoScope), ...s.enterprises.map((enterprise): Scope => ({ kind: 'enterprise', enterprise }))];
}

/** The organisations whose App installations the fleet uses (lower case): a repository of one is reached with its token. */
export function servedOrganizations(github: GitHubConnectionConfig, pools: readonly PoolConfig[]): Set<string> {
  const out = new Set<string>();
  if (github.organization !== undefined) out.add(github.organization.toLowerCase());
  for (const p of pools) {
    if (p.provider !== 'github') continue;
    const org = githubPoolScope(github, p).organization;
    if (org !== undefined) out.add(org.toLowerCase());
  }
  return out;
}

export function repoScope(full: string): Scope {
  const [owner, repo] = full.split('/') as [string, string];
  return { kind: 'repo', owner, repo };
}

/**
 * The runner id tagged on the instance: GitHub's numeric id for a runner of the connection's
 * own organisation (as fleets of one organisation always tagged it), `org/<id>` for another
 * organisation's, `owner/repo/<id>` for a repository's, `enterprise:<slug>/<id>` for an
 * enterprise's: deleting a runner needs its scope.
 */
export function runnerIdOf(scope: Scope, id: number, connectionOrg: string | undefined): string {
  // Lower case, the one canonical form (contract runnerIdKey): the id tagged at registration and
  // the one the sweep lists must be spelled alike, whichever pool spelled the scope how.
  if (scope.kind === 'org') return connectionOrg !== undefined && scope.org.toLowerCase() === connectionOrg.toLowerCase() ? String(id) : runnerIdKey(`${scope.org}/${id}`);
  if (scope.kind === 'enterprise') return runnerIdKey(`${ENTERPRISE_ID_PREFIX}${scope.enterprise}/${id}`);
  return runnerIdKey(`${scope.owner}/${scope.repo}/${id}`);
}

export function parseRunnerId(runnerId: string, connectionOrg: string | undefined): { scope: Scope; id: number } {
  const plain = /^(\d+)$/.exec(runnerId);
  if (plain && connectionOrg !== undefined) return { scope: { kind: 'org', org: connectionOrg }, id: Number(plain[1]) };
  const enterprise = new RegExp(`^${ENTERPRISE_ID_PREFIX}([A-Za-z0-9-]+)/(\\d+)$`).exec(runnerId);
  if (enterprise) return { scope: { kind: 'enterprise', enterprise: enterprise[1]! }, id: Number(enterprise[2]) };
  const org = /^([A-Za-z0-9-]+)\/(\d+)$/.exec(runnerId);
  if (org) return { scope: { kind: 'org', org: org[1]! }, id: Number(org[2]) };
  const repo = /^([\w.-]+)\/([\w.-]+)\/(\d+)$/.exec(runnerId);
  if (repo) return { scope: { kind: 'repo', owner: repo[1]!, repo: repo[2]! }, id: Number(repo[3]) };
  throw new Error(
    `"${runnerId}" is not a runner id of this fleet ("<id>" or "org/<id>" for organisation runners, "owner/repo/<id>" for repository runners, "${ENTERPRISE_ID_PREFIX}<slug>/<id>" for enterprise runners)`,
  );
}

/** Whether a runner can take the job: an organisation's takes the organisation's jobs, a repository's its own, an enterprise's any the fleet serves. */
export function scopeTakesJob(scope: Scope, job: JobMessage): boolean {
  // GitHub's owner and repository names are case-insensitive.
  if (scope.kind === 'enterprise') return true;
  if (scope.kind === 'org') return scope.org.toLowerCase() === job.owner.toLowerCase();
  return scope.owner.toLowerCase() === job.owner.toLowerCase() && scope.repo.toLowerCase() === job.project.toLowerCase();
}

export function installationKey(scope: Scope): string {
  if (scope.kind === 'org') return `org:${scope.org.toLowerCase()}`;
  if (scope.kind === 'enterprise') return `enterprise:${scope.enterprise.toLowerCase()}`;
  return `repo:${scope.owner}/${scope.repo}`.toLowerCase();
}

export function scopeParams(scope: Scope): Record<string, string> {
  if (scope.kind === 'org') return { org: scope.org };
  if (scope.kind === 'enterprise') return { enterprise: scope.enterprise };
  return { owner: scope.owner, repo: scope.repo };
}

/** The REST path prefix of a scope's runner routes. */
export function scopeRoute(scope: Scope): string {
  if (scope.kind === 'org') return '/orgs/{org}';
  if (scope.kind === 'enterprise') return '/enterprises/{enterprise}';
  return '/repos/{owner}/{repo}';
}
