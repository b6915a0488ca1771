import type { HttpAnswer } from './http';
import { checkQuery, type EndpointBounds, type PageWindow, type QueryBound, type Violation } from './query-bounds';

/**
 * GitHub's documented query bounds for every REST list the loopback GitHubs serve, from the
 * published description (@octokit/openapi-types 29 in node_modules, GitHub's rest-api-description
 * `api.github.com` 2022-11-28; each operation id below).
 *
 * `per_page` is "The number of results per page (max 100)" on each of these lists, default 30;
 * GitHub does not refuse a larger value: "If you specify a value greater than the maximum,
 * GitHub does not return an error. Instead, the value is automatically reduced to the maximum"
 * (docs.github.com, "Using pagination in the REST API"). Neither refusal nor correction is
 * documented for 0, a negative or a non-number: served with the default here.
 *
 * An enum parameter outside its values: the description lists 422 "Validation failed" for the
 * delivery list, and GitHub's validation answers are 422 with `errors`; the loopback answers
 * every enum violation so, so that a request outside the description fails a test.
 */
const PAGE: QueryBound = { kind: 'page' };
const PER_PAGE: QueryBound = { kind: 'per-page', fallback: 30, max: 100, above: 'clamp', zero: 'fallback', negative: 'fallback' };
const PAGED: Readonly<Record<string, QueryBound>> = { per_page: PER_PAGE, page: PAGE };
/** components/parameters/workflow-run-status. */
export const GITHUB_WORKFLOW_RUN_STATUSES = ['completed', 'action_required', 'cancelled', 'failure', 'neutral', 'skipped', 'stale', 'success', 'timed_out', 'in_progress', 'queued', 'requested', 'waiting', 'pending'] as const;

export const GITHUB_QUERY_BOUNDS: readonly EndpointBounds[] = [
  {
    method: 'GET',
    path: /^\/app\/hook\/deliveries$/,
    // cursor: opaque, from the link header; per_page without page (cursor paging).
    query: { per_page: PER_PAGE, status: { kind: 'enum', values: ['success', 'failure'] } },
    source: 'apps/list-webhook-deliveries',
  },
  { method: 'GET', path: /^\/installation\/repositories$/, query: PAGED, source: 'apps/list-repos-accessible-to-installation' },
  {
    method: 'GET',
    path: /^\/repos\/[^/]+\/[^/]+\/actions\/runs$/,
    query: { ...PAGED, status: { kind: 'enum', values: GITHUB_WORKFLOW_RUN_STATUSES }, exclude_pull_requests: { kind: 'boolean', spellings: ['true', 'false'] } },
    source: 'actions/list-workflow-runs-for-repo',
  },
  { method: 'GET', path: /^\/repos\/[^/]+\/[^/]+\/actions\/runs\/\d+\/jobs$/, query: { ...PAGED, filter: { kind: 'enum', values: ['latest', 'all'] } }, source: 'actions/list-jobs-for-workflow-run' },
  { method: 'GET', path: /^\/(?:orgs\/[^/]+|repos\/[^/]+\/[^/]+)\/actions\/runners$/, query: PAGED, source: 'actions/list-self-hosted-runners-for-org, actions/list-self-hosted-runners-for-repo' },
];

/** GitHub's validation answer (components/responses/validation_failed). */
export function githubRefusal(param: string, _violation: Violation): HttpAnswer {
  return { status: 422, body: { message: 'Validation Failed', errors: [{ resource: 'Query', field: param, code: 'invalid' }], documentation_url: 'https://docs.github.com/rest' } };
}

/** The request checked against GitHub's table: its 422, or the page GitHub would serve. */
export function checkGitHubQuery(method: string, path: string, query: URLSearchParams): { refusal: HttpAnswer } | PageWindow {
  return checkQuery(GITHUB_QUERY_BOUNDS, githubRefusal, method, path, query, 30);
}
