import { Provider } from './boot';

/**
 * Where a GitHub pool's jobs come from and where its runners register. A pool names its own
 * `organization` or `repositories` (and an `enterprise` to register at) or takes the
 * connection's, so a fleet of one organisation keeps its shape while another fleet serves
 * several organisations, each pool saying which.
 */
export interface GitHubPoolScope {
  /** The organisation whose jobs the pool takes; its runners register there (unless `enterprise`). */
  readonly organization?: string;
  /** "owner/repo" names whose jobs the pool takes, each runner registered at its job's repository (unless `enterprise`). */
  readonly repositories: string[];
  /**
   * The enterprise (slug) the pool's runners register at instead: an enterprise runner can take
   * jobs of every organisation of the enterprise its runner group allows. The jobs still come
   * from `organization`/`repositories`, where the App is installed.
   */
  readonly enterprise?: string;
}

/** The scope fields a GitHub connection or pool carries (FleetConfig), each optional on a pool. */
export interface GitHubScopeFields {
  readonly organization?: string;
  readonly repositories?: readonly string[];
  readonly enterprise?: string;
}

/** A pool's scope: its own when it names an organisation or repositories, else the connection's. */
export function githubPoolScope(connection: GitHubScopeFields, pool: GitHubScopeFields): GitHubPoolScope {
  const own = pool.organization !== undefined || (pool.repositories !== undefined && pool.repositories.length > 0);
  const source = own ? pool : connection;
  const enterprise = pool.enterprise ?? connection.enterprise;
  return {
    ...(source.organization === undefined ? {} : { organization: source.organization }),
    repositories: [...(source.repositories ?? [])],
    ...(enterprise === undefined ? {} : { enterprise }),
  };
}

/** Whether a scope takes the jobs of `owner/repo` (GitHub's logins and names are case-insensitive). */
export function scopeServesRepository(scope: GitHubPoolScope, owner: string, repo: string): boolean {
  if (scope.organization !== undefined) return scope.organization.toLowerCase() === owner.toLowerCase();
  const full = `${owner}/${repo}`.toLowerCase();
  return scope.repositories.some((r) => r.toLowerCase() === full);
}

interface ScopedPool extends GitHubScopeFields {
  readonly provider: string;
}

/** The scopes of the fleet's GitHub pools, in pool order. */
export function githubPoolScopes(connection: GitHubScopeFields, pools: readonly ScopedPool[]): GitHubPoolScope[] {
  return pools.filter((p) => p.provider === Provider.GITHUB).map((p) => githubPoolScope(connection, p));
}

/**
 * Where the fleet's jobs come from, each listed once: the organisations (lower case, as the
 * first pool spelled them) and the repositories outside them.
 */
export function githubJobSources(connection: GitHubScopeFields, pools: readonly ScopedPool[]): { organizations: string[]; repositories: string[] } {
  const orgs = new Map<string, string>();
  const repos = new Map<string, string>();
  const scopes = githubPoolScopes(connection, pools);
  for (const s of scopes) if (s.organization !== undefined && !orgs.has(s.organization.toLowerCase())) orgs.set(s.organization.toLowerCase(), s.organization);
  for (const s of scopes) {
    for (const r of s.repositories) {
      const owner = r.split('/')[0]!.toLowerCase();
      if (!orgs.has(owner) && !repos.has(r.toLowerCase())) repos.set(r.toLowerCase(), r);
    }
  }
  return { organizations: [...orgs.values()], repositories: [...repos.values()] };
}

/**
 * Where the fleet's runners are registered, each listed once (the sweeps, the drain and the
 * retry check list runners here): organisations, repositories, enterprises.
 */
export function githubRunnerScopes(connection: GitHubScopeFields, pools: readonly ScopedPool[]): { organizations: string[]; repositories: string[]; enterprises: string[] } {
  const orgs = new Map<string, string>();
  const repos = new Map<string, string>();
  const enterprises = new Map<string, string>();
  for (const s of githubPoolScopes(connection, pools)) {
    if (s.enterprise !== undefined) enterprises.set(s.enterprise.toLowerCase(), enterprises.get(s.enterprise.toLowerCase()) ?? s.enterprise);
    else if (s.organization !== undefined) orgs.set(s.organization.toLowerCase(), orgs.get(s.organization.toLowerCase()) ?? s.organization);
    else for (const r of s.repositories) repos.set(r.toLowerCase(), repos.get(r.toLowerCase()) ?? r);
  }
  return { organizations: [...orgs.values()], repositories: [...repos.values()], enterprises: [...enterprises.values()] };
}

/** GitHub's login rule (organisation, enterprise slug): letters, digits and single inner hyphens, at most 39. */
const LOGIN = /^[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}$/;
const REPOSITORY = /^[\w.-]+\/[\w.-]+$/;

/**
 * Problems of the scope fields at `path` (the connection "github" or a pool "pools.N"), as
 * `[field path, why]` pairs: `organization` and `repositories` together (GitHub's runners
 * register at one of them; the second would be ignored), malformed values.
 */
export function githubScopeProblems(path: string, fields: Record<string, unknown>): [string, string][] {
  const out: [string, string][] = [];
  const { organization, repositories, enterprise } = fields;
  if (organization !== undefined && (typeof organization !== 'string' || !LOGIN.test(organization))) {
    out.push([`${path}.organization`, `must be a GitHub organisation login (letters, digits, inner "-", at most 39), got ${JSON.stringify(organization)}`]);
  }
  if (enterprise !== undefined && (typeof enterprise !== 'string' || !LOGIN.test(enterprise))) {
    out.push([`${path}.enterprise`, `must be an enterprise slug (letters, digits, inner "-", at most 39), got ${JSON.stringify(enterprise)}`]);
  }
  if (repositories !== undefined) {
    if (!Array.isArray(repositories)) out.push([`${path}.repositories`, `must be a list of "owner/repo" names, got ${JSON.stringify(repositories)}`]);
    else repositories.forEach((r, k) => {
      if (typeof r !== 'string' || !REPOSITORY.test(r)) out.push([`${path}.repositories.${k}`, `${JSON.stringify(r)} must be "owner/repo"`]);
    });
  }
  if (organization !== undefined && Array.isArray(repositories) && repositories.length > 0) {
    out.push([
      `${path}.organization`,
      "and repositories are both set: runners register at the organisation (taking every repository's jobs) or at the listed repositories, not both; " +
        'drop repositories for organisation runners, or drop organization for repository runners',
    ]);
  }
  return out;
}

/**
 * Problems of the fleet's GitHub scopes as a whole: every GitHub pool needs an organisation or
 * repositories (its own or the connection's); GitLab pools take no GitHub scope.
 */
export function fleetScopeProblems(github: Record<string, unknown> | undefined, pools: readonly unknown[]): [string, string][] {
  const out: [string, string][] = [];
  if (github !== undefined) out.push(...githubScopeProblems('github', github));
  const connectionHasScope = github !== undefined && (github.organization !== undefined || (Array.isArray(github.repositories) && github.repositories.length > 0));
  pools.forEach((raw, i) => {
    if (typeof raw !== 'object' || raw === null) return;
    const pool = raw as Record<string, unknown>;
    const p = `pools.${i}`;
    const set = (['organization', 'repositories', 'enterprise'] as const).filter((k) => pool[k] !== undefined);
    if (pool.provider !== Provider.GITHUB) {
      for (const k of set) out.push([`${p}.${k}`, `is a GitHub scope, but the pool's provider is "${String(pool.provider)}"; remove it (GitLab runners register at gitlab.runnerType/scopeId)`]);
      return;
    }
    out.push(...githubScopeProblems(p, pool));
    // Enterprise runner groups have ids of their own, and the one github.runnerGroupId goes to
    // every generate-jitconfig, the enterprise's too: only the default group (1) is the same id there.
    const groupId = github?.runnerGroupId;
    const enterprise = pool.enterprise ?? github?.enterprise;
    if (enterprise !== undefined && groupId !== undefined && groupId !== 1 && !out.some(([path]) => path === 'github.runnerGroupId')) {
      out.push([
        'github.runnerGroupId',
        `is ${JSON.stringify(groupId)}, but pool ${JSON.stringify(pool.name)} registers at enterprise ${JSON.stringify(enterprise)} (${pool.enterprise !== undefined ? `pools[${i}].enterprise` : 'github.enterprise'}), ` +
          "whose runner groups have ids of their own: the one runner group id would go to the enterprise's registrations too; " +
          'leave github.runnerGroupId at 1 (the default group) while a pool registers at an enterprise',
      ]);
    }
    const ownScope = pool.organization !== undefined || (Array.isArray(pool.repositories) && pool.repositories.length > 0);
    if (!ownScope && !connectionHasScope && github !== undefined) {
      out.push([`${p}.organization`, 'or repositories ("owner/repo") must be set, on the pool or on the github connection: the pool has nowhere to take jobs from']);
    }
  });
  return out;
}
