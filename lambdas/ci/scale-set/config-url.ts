import { githubPoolScope, type GitHubConnectionConfig, type PoolConfig } from '../../shared/contract';

/** Where a pool's scale set lives: an organisation, or one repository. */
export type ScaleSetScope = { readonly kind: 'org'; readonly org: string } | { readonly kind: 'repo'; readonly owner: string; readonly repo: string };

/**
 * The pool's scale-set scope. Scale sets are registered at an organisation or a repository
 * (the client also knows enterprises; this fleet's pools do not use them), so a pool of
 * several repositories or of an enterprise cannot be one.
 */
export function scaleSetScope(github: GitHubConnectionConfig, pool: PoolConfig): ScaleSetScope {
  const scope = githubPoolScope(github, pool);
  if (scope.enterprise !== undefined) throw new Error(`pool "${pool.name}": a scale set cannot be registered at an enterprise; name an organisation or one repository`);
  if (scope.organization !== undefined) return { kind: 'org', org: scope.organization };
  const [only, ...more] = scope.repositories;
  if (only === undefined || more.length > 0) throw new Error(`pool "${pool.name}": a scale set is registered at an organisation or at ONE repository (the pool names ${scope.repositories.length})`);
  const [owner, repo] = only.split('/') as [string, string];
  return { kind: 'repo', owner, repo };
}

/**
 * The configuration URL the registration exchange names (`githubConfigUrl` in the client):
 * the web URL of the organisation or repository. From the REST API URL: api.github.com is
 * github.com, `api.<x>.ghe.com` is `<x>.ghe.com`, GitHub Enterprise Server's `/api/v3` is its
 * host; any other URL (the loopback GitHub) serves both at its base (config.go `GitHubAPIURL`,
 * read backwards).
 */
export function githubConfigUrl(apiUrl: string, scope: ScaleSetScope): string {
  const u = new URL(apiUrl.replace(/\/+$/, ''));
  let web: string;
  if (u.hostname.toLowerCase() === 'api.github.com') web = 'https://github.com';
  else if (/^api\.[^.]+\.ghe\.com$/i.test(u.hostname)) web = `${u.protocol}//${u.host.slice('api.'.length)}`;
  else if (/\/api\/v3$/.test(u.pathname)) web = `${u.origin}${u.pathname.slice(0, -'/api/v3'.length)}`;
  else web = `${u.origin}${u.pathname === '/' ? '' : u.pathname}`;
  return scope.kind === 'org' ? `${web}/${scope.org}` : `${web}/${scope.owner}/${scope.repo}`;
}

/** The REST route that mints a registration token for the scope (the first step of the exchange). */
export function registrationTokenRoute(scope: ScaleSetScope): { route: string; params: Record<string, string>; target: string } {
  return scope.kind === 'org'
    ? { route: 'POST /orgs/{org}/actions/runners/registration-token', params: { org: scope.org }, target: scope.org }
    : { route: 'POST /repos/{owner}/{repo}/actions/runners/registration-token', params: { owner: scope.owner, repo: scope.repo }, target: `${scope.owner}/${scope.repo}` };
}
