import {
  fleetGitLabScopes,
  gitLabScopeKey,
  gitLabScopeOf,
  GitLabRunnerType,
  instanceIdOfRunnerName,
  JobLookupError,
  runnerName,
  Provider,
  type CiProvider,
  type CreateRunnerOptions,
  type GitLabConnectionConfig,
  type GitLabRunnerScope,
  type ListRunnersOptions,
  type JobMessage,
  type RunnerRegistration,
  type RunnerSummary,
} from '../shared/contract';
import { adviseRetry, boundedFetch, DEFAULT_RETRY_POLICY, realSleep, type HeaderLookup, type ProviderTransportOptions, type RetryPolicy } from './rate-limit';

export interface GitLabProviderOptions extends ProviderTransportOptions {
  readonly gitlab: GitLabConnectionConfig;
  /** The token with the create_runner, manage_runner and read_api scopes, read lazily (SSM). */
  readonly token: () => Promise<string>;
  /** Called when GitLab answers 401: the token was probably rotated, so the source must read it again. */
  readonly invalidateToken?: () => void;
}

/**
 * Job states in which no runner has the job yet (GitLab's `Ci::HasStatus`): `preparing` sits
 * between created and pending while prerequisites (e.g. Kubernetes resources) are made;
 * `scheduled` is a delayed job (`when: delayed`) whose timer has not fired; it becomes pending.
 */
const WAITING_STATUSES = new Set(['created', 'waiting_for_resource', 'preparing', 'scheduled', 'pending']);
/**
 * Job states in which a runner still works on the job: `canceling` (GitLab 17.0+) is a cancelled
 * job whose runner still runs its `after_script`; deleting the runner then cuts that off.
 */
export const RUNNER_WORKING_STATUSES = ['running', 'canceling'] as const;

export class GitLabApiError extends Error {
  constructor(
    readonly operation: string,
    readonly status: number,
    detail: string,
  ) {
    super(`GitLab ${operation} failed: ${status === 0 ? detail : `HTTP ${status}${detail ? ` (${detail})` : ''}`}`);
    this.name = 'GitLabApiError';
  }
}

interface ApiAnswer {
  readonly status: number;
  readonly data: unknown;
  readonly headers: Headers;
}

/** What the reconciler gets of one REST call (lambdas/reconcile/gitlab.ts). */
export interface GitLabAnswer {
  readonly status: number;
  readonly data: unknown;
  readonly header: HeaderLookup;
}

export interface GitLabRequestOptions {
  /** Statuses returned as answers; any other fails the call (after the retries the policy allows). */
  readonly expect: number[];
  /** 5xx answers are retried only for calls safe to repeat. */
  readonly retryServerErrors?: boolean;
  /** Sees the headers of every answer, refusals included (the rate limit's `RateLimit-*`). */
  readonly observe?: (header: HeaderLookup) => void;
}

/**
 * GitLab CI through its REST API v4 (gitlab.com or self-managed): one runner per instance
 * created with `POST /user/runners` (the runner authentication token is its single-use
 * credential), deleted with `DELETE /runners/:id`.
 */
export class GitLabProvider implements CiProvider {
  readonly provider = Provider.GITLAB;
  private readonly fetch: typeof fetch;
  private readonly api: string;
  private readonly policy: RetryPolicy;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly now: () => number;

  constructor(private readonly options: GitLabProviderOptions) {
    this.fetch = boundedFetch(options.fetch ?? globalThis.fetch, options.timeoutMs ?? 10_000);
    this.api = `${options.gitlab.url.replace(/\/+$/, '')}/api/v4`;
    this.policy = { ...DEFAULT_RETRY_POLICY, ...options.retry };
    this.sleep = options.sleep ?? realSleep;
    this.now = options.now ?? Date.now;
  }

  /**
   * The runner is registered in the pool's scope (its `gitlabGroupId`/`gitlabProjectId`, else the
   * connection's). `scoped` (reuse): a `project_type` runner of the job's project (`project_id`), whatever
   * the pool's runner type; the token's user needs `create_runner` on that project
   * (Maintainer). A job without a project id cannot have one: refused, nothing registered.
   */
  async createRunner(job: JobMessage, instanceId: string, pool: string, options: CreateRunnerOptions = {}): Promise<RunnerRegistration> {
    const config = this.options.pools.find((p) => p.name === pool);
    if (!config || config.provider !== 'gitlab') throw new Error(`pool "${pool}" is not a GitLab pool of this fleet`);
    if (options.scoped && (job.projectId === undefined || !Number.isSafeInteger(job.projectId) || job.projectId <= 0)) {
      throw new Error(`job ${job.jobId} has no project id: no project runner can be registered for it`);
    }
    const name = runnerName(this.options.prefix, instanceId, new Date(this.now()));
    const { runnerType, scopeId } = options.scoped ? { runnerType: GitLabRunnerType.PROJECT, scopeId: job.projectId } : gitLabScopeOf(this.options.gitlab, config);
    const body = {
      runner_type: runnerType,
      ...(runnerType === 'group_type' ? { group_id: scopeId } : {}),
      ...(runnerType === 'project_type' ? { project_id: scopeId } : {}),
      description: name,
      tag_list: [...config.labels],
      run_untagged: config.runUntagged,
      // One job per runner: locking it to its project keeps a project runner from being shared.
      ...(runnerType === 'project_type' ? { locked: true } : {}),
    };
    // Not retried on 5xx: GitLab may have created the runner; the sweep removes one that leaked.
    const res = await this.call('create runner', 'POST', '/user/runners', { body, retryServerErrors: false, expect: [201] });
    const data = res.data as { id?: unknown; token?: unknown };
    if (!Number.isSafeInteger(data?.id) || typeof data.token !== 'string' || data.token === '') {
      throw new GitLabApiError('create runner', res.status, 'answer lacks id or token');
    }
    return { runnerId: String(data.id), name, secret: data.token, url: this.options.gitlab.url };
  }

  async deleteRunner(runnerId: string): Promise<void> {
    if (!/^\d+$/.test(runnerId)) throw new Error(`"${runnerId}" is not a GitLab runner id`);
    await this.call('delete runner', 'DELETE', `/runners/${runnerId}`, { expect: [204, 200, 404] });
  }

  /**
   * The fleet's runners in every scope its GitLab pools register in, each scope listed once (two
   * pools of one group cost one list); with a reusable pool, also the project runners its scoped
   * registrations made, from the token user's own runners (`GET /runners?type=project_type`,
   * api/runners.md "List owned runners": the projects the user maintains, where it could create
   * them). A runner listed twice (a project's list shows its group's runners) is reported once.
   * One scope's refusal fails the whole list: a sweep must not read the runners of a scope it
   * could not list as gone.
   */
  async listRunners(_options: ListRunnersOptions = {}): Promise<RunnerSummary[]> {
    const pooled = fleetGitLabScopes(this.options.gitlab, this.options.pools);
    // No GitLab pool (all removed): the connection's scope still holds what they left.
    const scopes = pooled.length > 0 ? pooled : [gitLabScopeOf(this.options.gitlab, {})];
    const lists = scopes.map((scope) => ({ base: runnerListPath(scope.runnerType, scope.scopeId), type: scope.runnerType as string, key: gitLabScopeKey(scope), what: this.scopeInWords(scope) }));
    const reusable = this.options.pools.some((p) => p.provider === 'gitlab' && p.reuse !== undefined);
    if (reusable && scopes.some((s) => s.runnerType !== GitLabRunnerType.PROJECT)) lists.push({ base: '/runners', type: GitLabRunnerType.PROJECT, key: 'project_type:owned', what: "the token user's project runners" });
    const out: RunnerSummary[] = [];
    const seen = new Set<string>();
    for (const list of lists) {
      for (const r of await this.listPages(list.base, list.type, list.key, `list runners of ${list.what}`)) {
        if (seen.has(r.runnerId)) continue;
        seen.add(r.runnerId);
        out.push(r);
      }
    }
    return out;
  }

  /**
   * A scope as the user configured it, for a refusal's message: `group 40 (pools[1].gitlabGroupId)`,
   * so the drain's failure says which scope the token cannot manage and where it was set.
   */
  private scopeInWords(scope: GitLabRunnerScope): string {
    if (scope.runnerType === GitLabRunnerType.INSTANCE) return 'the instance (gitlab.runnerType)';
    const kind = scope.runnerType === GitLabRunnerType.GROUP ? 'group' : 'project';
    const prop = kind === 'group' ? 'gitlabGroupId' : 'gitlabProjectId';
    const i = this.options.pools.findIndex((p) => p.provider === 'gitlab' && p[prop] === scope.scopeId);
    return `${kind} ${scope.scopeId ?? '?'} (${i >= 0 ? `pools[${i}].${prop}` : 'gitlab.scopeId'})`;
  }

  /** One runner list, page by page up to the cap (told to `onListTruncated` when reached). */
  private async listPages(base: string, type: string, scope: string, operation = 'list runners'): Promise<RunnerSummary[]> {
    const out: RunnerSummary[] = [];
    const maxPages = this.options.maxPages ?? 20;
    for (let page = 1; page <= maxPages; page++) {
      const res = await this.call(operation, 'GET', `${base}?type=${type}&per_page=100&page=${page}`, { expect: [200] });
      if (!Array.isArray(res.data)) throw new GitLabApiError(operation, res.status, 'answer is not a list');
      for (const r of res.data as Record<string, unknown>[]) {
        const name = typeof r.description === 'string' && r.description !== '' ? r.description : typeof r.name === 'string' ? r.name : '';
        if (instanceIdOfRunnerName(this.options.prefix, name) === undefined || !Number.isSafeInteger(r.id)) continue;
        out.push({ runnerId: String(r.id), name, status: typeof r.status === 'string' ? r.status : r.online === true ? 'online' : 'offline' });
      }
      const next = res.headers.get('x-next-page');
      if (!next || res.data.length === 0) return out;
    }
    // GitLab still named a next page: the sweep sees only part of the runners.
    this.options.onListTruncated?.({ scope, pages: maxPages });
    return out;
  }

  /**
   * Whether GitLab lists a job the runner still works on (`GET /runners/:id/jobs`,
   * api/runners.md#list-jobs-processed-by-a-runner): `running`, or `canceling` (GitLab 17.0+,
   * a cancelled job whose `after_script` still runs on the runner). The runner's `status` says
   * only when it last contacted GitLab, not whether it works. One status per request: `running`
   * first, then `canceling`; a GitLab older than `canceling` answers that request 400 (not a
   * status it knows), read as none. Only 200 with a list is an answer; a 404 (runner gone, or not
   * visible to the token) or any other failure throws, so the caller keeps the runner. GitLab
   * lists only jobs of projects where the token's user has at least the Reporter role.
   */
  async runnerBusy(runnerId: string): Promise<boolean> {
    if (!/^\d+$/.test(runnerId)) throw new Error(`"${runnerId}" is not a GitLab runner id`);
    for (const status of RUNNER_WORKING_STATUSES) {
      const res = await this.call(`list ${status} jobs`, 'GET', `/runners/${runnerId}/jobs?status=${status}&per_page=1`, { expect: status === 'running' ? [200] : [200, 400] });
      if (res.status === 400) continue;
      if (!Array.isArray(res.data)) throw new GitLabApiError(`list ${status} jobs`, res.status, 'answer is not a list');
      if (res.data.length > 0) return true;
    }
    return false;
  }

  /**
   * `PUT /runners/:id` with `paused` (api/runners.md, "Update runner's details"; `paused` since
   * GitLab 14.8, which replaced `active`): a paused runner is handed no new job and keeps the one
   * it runs. Safe to repeat, so 5xx answers are retried; any answer but 200 throws.
   */
  async setRunnerPaused(runnerId: string, paused: boolean): Promise<void> {
    if (!/^\d+$/.test(runnerId)) throw new Error(`"${runnerId}" is not a GitLab runner id`);
    await this.call(paused ? 'pause runner' : 'unpause runner', 'PUT', `/runners/${runnerId}`, { body: { paused }, expect: [200], retryServerErrors: true });
  }

  /** `GET /runners/:id`: its `paused` (or, before 14.8, `!active`); undefined on 404 (gone). */
  async runnerPaused(runnerId: string): Promise<boolean | undefined> {
    if (!/^\d+$/.test(runnerId)) throw new Error(`"${runnerId}" is not a GitLab runner id`);
    const res = await this.call('read runner', 'GET', `/runners/${runnerId}`, { expect: [200, 404] });
    if (res.status === 404) return undefined;
    const data = res.data as { paused?: unknown; active?: unknown } | undefined;
    if (typeof data?.paused === 'boolean') return data.paused;
    if (typeof data?.active === 'boolean') return !data.active;
    throw new GitLabApiError('read runner', res.status, 'answer lacks paused');
  }

  async isJobQueued(job: JobMessage): Promise<boolean> {
    const data = await this.job(job, 'look up job');
    return typeof data.status === 'string' && WAITING_STATUSES.has(data.status);
  }

  async resolveLabels(job: JobMessage, signal?: AbortSignal): Promise<string[]> {
    const data = await this.job(job, 'resolve job tags', signal);
    const tags = data.tag_list;
    if (!Array.isArray(tags) || !tags.every((t) => typeof t === 'string')) throw new GitLabApiError('resolve job tags', 200, 'answer lacks tag_list');
    return tags as string[];
  }

  /** One REST v4 call (`path` below /api/v4), with the provider's token, bound and retries. */
  async request(operation: string, method: string, path: string, opts: GitLabRequestOptions): Promise<GitLabAnswer> {
    const res = await this.call(operation, method, path, opts);
    return { status: res.status, data: res.data, header: (h) => res.headers.get(h) ?? undefined };
  }

  /** The job as GitLab shows it; 404 (deleted, or the token cannot see the project) is a JobLookupError. */
  private async job(job: JobMessage, operation: string, signal?: AbortSignal): Promise<Record<string, unknown>> {
    if (job.provider !== 'gitlab' || job.projectId === undefined || !/^\d+$/.test(job.providerJobId)) {
      throw new Error(`job ${job.jobId} is not a GitLab job with a project id`);
    }
    const res = await this.call(operation, 'GET', `/projects/${job.projectId}/jobs/${job.providerJobId}`, { expect: [200, 404], signal });
    if (res.status === 404) throw new JobLookupError(Provider.GITLAB, job.jobId, 'not-found');
    if (typeof res.data !== 'object' || res.data === null) throw new GitLabApiError(operation, res.status, 'answer is not a job');
    return res.data as Record<string, unknown>;
  }

  private async call(
    operation: string,
    method: string,
    path: string,
    opts: { body?: unknown; expect: number[]; retryServerErrors?: boolean | undefined; signal?: AbortSignal | undefined; observe?: ((header: HeaderLookup) => void) | undefined },
  ): Promise<ApiAnswer> {
    const token = await this.options.token();
    const policy = { ...this.policy, retryServerErrors: opts.retryServerErrors ?? this.policy.retryServerErrors };
    for (let attempt = 1; ; attempt++) {
      let res: Response;
      try {
        res = await this.fetch(`${this.api}${path}`, {
          method,
          headers: {
            'private-token': token,
            accept: 'application/json',
            ...(opts.body === undefined ? {} : { 'content-type': 'application/json' }),
          },
          ...(opts.body === undefined ? {} : { body: JSON.stringify(opts.body) }),
          ...(opts.signal ? { signal: opts.signal } : {}),
        });
      } catch (e) {
        // A timeout or a refused connection: the error names neither token nor body.
        throw new GitLabApiError(operation, 0, (e as Error).name === 'TimeoutError' ? 'timed out' : `request failed (${(e as Error).name})`);
      }
      const text = await res.text();
      opts.observe?.((h) => res.headers.get(h) ?? undefined);
      if (opts.expect.includes(res.status)) {
        let data: unknown = undefined;
        if (text !== '') {
          try {
            data = JSON.parse(text);
          } catch {
            throw new GitLabApiError(operation, res.status, 'answer is not JSON');
          }
        }
        return { status: res.status, data, headers: res.headers };
      }
      // Refused: the token was probably rotated; the next call reads it again rather than the cached copy.
      if (res.status === 401) this.options.invalidateToken?.();
      const advice = adviseRetry(res.status, (h) => res.headers.get(h) ?? undefined, this.now(), attempt, policy);
      if (!advice.retry) throw new GitLabApiError(operation, res.status, errorDetail(text, advice.why));
      if (opts.signal?.aborted) throw new GitLabApiError(operation, 0, 'aborted');
      await this.sleep(advice.waitMs);
      if (opts.signal?.aborted) throw new GitLabApiError(operation, 0, 'aborted');
    }
  }
}

/** The list of one scope's runners (api/runners.md): every runner, a group's, or a project's. */
function runnerListPath(runnerType: GitLabRunnerType, scopeId: number | undefined): string {
  if (runnerType === GitLabRunnerType.INSTANCE) return '/runners/all';
  return runnerType === GitLabRunnerType.GROUP ? `/groups/${scopeId}/runners` : `/projects/${scopeId}/runners`;
}

/** GitLab's `{"message": ...}` error text, short and without control characters. */
function errorDetail(text: string, why: string): string {
  let message = '';
  try {
    const parsed = JSON.parse(text) as { message?: unknown; error?: unknown };
    const m = parsed.message ?? parsed.error;
    message = typeof m === 'string' ? m : m === undefined ? '' : JSON.stringify(m);
  } catch {
    // not JSON
  }
  return [message.replace(/[^\x20-\x7e]/g, '?').slice(0, 160), why].filter(Boolean).join('; ');
}
