import type { ScaleSetScope } from '../../shared/contract';

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
  return `${web}/${scope.organization ?? scope.repository!}`;
}

/** The REST route that mints a registration token for the scope (the first step of the exchange). */
export function registrationTokenRoute(scope: ScaleSetScope): { route: string; params: Record<string, string>; target: string } {
  if (scope.organization !== undefined) return { route: 'POST /orgs/{org}/actions/runners/registration-token', params: { org: scope.organization }, target: scope.organization };
  const [owner = '', repo = ''] = scope.repository!.split('/');
  return { route: 'POST /repos/{owner}/{repo}/actions/runners/registration-token', params: { owner, repo }, target: scope.repository! };
}
