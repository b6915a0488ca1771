import type { HttpAnswer } from './http';
import { checkQuery, type EndpointBounds, type PageWindow, type QueryBound, type Violation } from './query-bounds';

/**
 * GitLab's documented query bounds for every REST v4 list the loopback GitLabs serve (paths
 * below `/api/v4`). GitLab validates parameters with Grape before the endpoint runs (after
 * authentication) and answers a violation 400 `{"error":"<param> <reason>"}`.
 *
 * Paging, on every list (`lib/api/pagination_params.rb`, `use :pagination`): `page` and
 * `per_page` are integers (else "is invalid"), `per_page` 0 is refused (`except_values: [0]`,
 * "has a value not allowed"); the page size is then Kaminari's: above 100 it is 100
 * (`config/initializers/kaminari_config.rb`, `max_per_page = 100`; doc/api/rest/_index.md
 * "Pagination": "default: 20, max: 100"), below 0 the default 20, a page below 1 the first.
 * The hook event list narrows `per_page` to 1..20 (`lib/api/hooks/events.rb`,
 * `values: 1..20`: "does not have a valid value"), for project and group hooks alike.
 */
const PAGE: QueryBound = { kind: 'page' };
const PER_PAGE: QueryBound = { kind: 'per-page', fallback: 20, max: 100, above: 'clamp', zero: 'refuse', negative: 'fallback' };
/** `lib/api/hooks/events.rb`: `per_page` Integer, default 20, `values: 1..20`. */
export const GITLAB_HOOK_EVENTS_MAX_PER_PAGE = 20;
const HOOK_EVENTS_PER_PAGE: QueryBound = { kind: 'per-page', fallback: 20, max: GITLAB_HOOK_EVENTS_MAX_PER_PAGE, above: 'refuse', zero: 'refuse', negative: 'refuse' };
/** Grape's Boolean (dry-types `Params::Bool`): these spellings, any case. */
const BOOLEAN: QueryBound = { kind: 'boolean', spellings: ['true', 'false', '1', '0', 't', 'f', 'yes', 'no', 'y', 'n', 'on', 'off'] };
/** `Ci::HasStatus::AVAILABLE_STATUSES` (app/models/concerns/ci/has_status.rb), `canceling` since 17.0. */
export const GITLAB_JOB_STATUSES = ['created', 'waiting_for_resource', 'preparing', 'waiting_for_callback', 'pending', 'running', 'success', 'failed', 'canceling', 'canceled', 'skipped', 'manual', 'scheduled'] as const;
/** `Ci::Runner::AVAILABLE_TYPES`. */
export const GITLAB_RUNNER_TYPES = ['instance_type', 'group_type', 'project_type'] as const;
/** `Ci::Runner::AVAILABLE_STATUSES_INCL_DEPRECATED` (`DEPRECATED_STATUSES` + `AVAILABLE_STATUSES`). */
const RUNNER_STATUSES = ['active', 'paused', 'online', 'offline', 'never_contacted', 'stale'];
/** `Ci::Runner::AVAILABLE_SCOPES`: `AVAILABLE_TYPES_LEGACY` + `AVAILABLE_TYPES` + the statuses above. */
const RUNNER_SCOPES = ['specific', 'shared', ...GITLAB_RUNNER_TYPES, ...RUNNER_STATUSES];
/**
 * The runner lists' filters (`lib/api/ci/runners.rb`, `params :filter_params`): `version_prefix`
 * with `regexp: /^[\d+.]+/` (Ruby's `^` starts any line: the `m` flag), `tag_list` an
 * `Array[String]` read comma-separated (any text).
 */
const RUNNER_LIST: Readonly<Record<string, QueryBound>> = {
  type: { kind: 'enum', values: GITLAB_RUNNER_TYPES },
  status: { kind: 'enum', values: RUNNER_STATUSES },
  paused: BOOLEAN,
  tag_list: { kind: 'text' },
  version_prefix: { kind: 'pattern', pattern: /^[\d+.]+/m },
  page: PAGE,
  per_page: PER_PAGE,
};
/**
 * With the deprecated `scope` (`params :deprecated_filter_params`, values `AVAILABLE_SCOPES`):
 * the instance's and a project's lists; the group's list does not declare it (ignored there).
 */
const RUNNER_LIST_WITH_SCOPE: Readonly<Record<string, QueryBound>> = { scope: { kind: 'enum', values: RUNNER_SCOPES }, ...RUNNER_LIST };
/**
 * The owned list (`GET /runners`) then refuses a scope outside the statuses with its own 400
 * ("Scope contains invalid value", `filter_runners`): a 400 here too, in Grape's words.
 */
const OWNED_RUNNER_LIST: Readonly<Record<string, QueryBound>> = { ...RUNNER_LIST, scope: { kind: 'enum', values: RUNNER_STATUSES } };
/** Rack's HTTP status codes (`Rack::Utils::HTTP_STATUS_CODES`) as `lib/api/hooks/events.rb` takes them, and its categories. */
const HTTP_STATUS_CODES = [100, 101, 102, 103, 200, 201, 202, 203, 204, 205, 206, 207, 208, 226, 300, 301, 302, 303, 304, 305, 307, 308, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421, 422, 423, 424, 425, 426, 428, 429, 431, 451, 500, 501, 502, 503, 504, 505, 506, 507, 508, 511];
const HOOK_EVENT_STATUSES = [...HTTP_STATUS_CODES.map(String), 'successful', 'client_failure', 'server_failure'];

export const GITLAB_QUERY_BOUNDS: readonly EndpointBounds[] = [
  {
    method: 'GET',
    path: /^\/(?:projects|groups)\/[^/]+\/hooks\/\d+\/events$/,
    query: { status: { kind: 'enum', values: HOOK_EVENT_STATUSES, list: true, commaSeparated: true }, page: PAGE, per_page: HOOK_EVENTS_PER_PAGE },
    source: 'lib/api/hooks/events.rb (mounted by lib/api/project_hooks.rb and group_hooks.rb); doc/api/project_webhooks.md "List webhook events"',
  },
  {
    method: 'GET',
    path: /^\/projects\/[^/]+\/jobs$/,
    // An unknown scope is refused by the values validator; coerce_with reads `scope=x` as [x].
    query: { scope: { kind: 'enum', values: GITLAB_JOB_STATUSES, list: true }, page: PAGE, per_page: PER_PAGE },
    source: 'lib/api/ci/jobs.rb "Get a projects jobs" (values: CommitStatus::AVAILABLE_STATUSES); doc/api/jobs.md',
  },
  {
    method: 'GET',
    path: /^\/groups\/[^/]+\/projects$/,
    query: { include_subgroups: BOOLEAN, with_shared: BOOLEAN, archived: BOOLEAN, simple: BOOLEAN, page: PAGE, per_page: PER_PAGE },
    source: 'lib/api/groups.rb "Get a list of projects in this group"; doc/api/groups.md',
  },
  { method: 'GET', path: /^\/runners$/, query: OWNED_RUNNER_LIST, source: 'lib/api/ci/runners.rb "List owned runners" (and filter_runners); doc/api/runners.md' },
  { method: 'GET', path: /^\/runners\/all$/, query: RUNNER_LIST_WITH_SCOPE, source: 'lib/api/ci/runners.rb "List all runners"; doc/api/runners.md' },
  { method: 'GET', path: /^\/projects\/[^/]+\/runners$/, query: RUNNER_LIST_WITH_SCOPE, source: 'lib/api/ci/runners.rb "List project\'s runners"; doc/api/runners.md' },
  { method: 'GET', path: /^\/groups\/[^/]+\/runners$/, query: RUNNER_LIST, source: 'lib/api/ci/runners.rb "List group\'s runners"; doc/api/runners.md' },
  {
    method: 'GET',
    path: /^\/runners\/\d+\/jobs$/,
    query: { status: { kind: 'enum', values: GITLAB_JOB_STATUSES }, order_by: { kind: 'enum', values: ['id'] }, sort: { kind: 'enum', values: ['asc', 'desc'] }, page: PAGE, per_page: PER_PAGE },
    source: 'lib/api/ci/runners.rb "List runner\'s jobs" (values: Ci::Build::AVAILABLE_STATUSES); doc/api/runners.md',
  },
];

const REASON: Record<Violation, string> = { invalid: 'is invalid', 'not-allowed': 'has a value not allowed', 'out-of-values': 'does not have a valid value' };

/** Grape's validation answer as GitLab's API sends it. */
export function gitlabRefusal(param: string, violation: Violation): HttpAnswer {
  return { status: 400, body: { error: `${param} ${REASON[violation]}` } };
}

/** The request (path below `/api/v4`) checked against GitLab's table: its 400, or the page GitLab would serve. */
export function checkGitLabQuery(method: string, path: string, query: URLSearchParams): { refusal: HttpAnswer } | PageWindow {
  return checkQuery(GITLAB_QUERY_BOUNDS, gitlabRefusal, method, path, query, 20);
}
