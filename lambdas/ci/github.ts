import { createAppAuth } from '@octokit/auth-app';
import { request as octokitRequest } from '@octokit/request';
import { RequestError } from '@octokit/request-error';
import {
  instanceIdOfRunnerName,
  JobLookupError,
  runnerName,
  Provider,
  type CiProvider,
  type CreateRunnerOptions,
  type GitHubConnectionConfig,
  type ListRunnersOptions,
  type JobMessage,
  type RunnerRegistration,
  type RunnerSummary,
} from '../shared/contract';
import { GITHUB_SELF_HOSTED_LABEL } from '../shared/match-pool';
import { installationKey, parseRunnerId, registrationScope, repoScope, runnerIdOf, runnerScopes, scopeParams, scopeRoute, scopeTakesJob, servedOrganizations, type Scope } from './github-scopes';
import { adviseRetry, boundedFetch, DEFAULT_RETRY_POLICY, realSleep, type HeaderLookup, type ProviderTransportOptions, type RetryPolicy } from './rate-limit';

export interface GitHubProviderOptions extends ProviderTransportOptions {
  readonly github: GitHubConnectionConfig;
  /** The App's PEM private key, read lazily (SSM). */
  readonly privateKey: () => Promise<string>;
  /**
   * Called when GitHub refuses the App's JWT (401): the key was probably rotated, so the
   * source must read it again on the next `privateKey()` instead of serving a cached copy.
   */
  readonly invalidatePrivateKey?: () => void;
  /** An installation token is replaced when it has less than this left (they live one hour). */
  readonly tokenRefreshMarginMs?: number;
  /** Installations whose tokens are kept; the least recently used goes first. */
  readonly maxCachedInstallations?: number;
  /**
   * The classic personal access token for enterprise runners (SSM), read lazily: only pools
   * that register at an enterprise use it (GitHub's enterprise runner routes take no App token).
   */
  readonly enterpriseToken?: () => Promise<string>;
  /** Called when GitHub refuses the enterprise token (401), so the next read is fresh. */
  readonly invalidateEnterpriseToken?: () => void;
  /**
   * Told every answer to an installation token, with the account (lower case) whose
   * installation budget it spent: the call knows its scope, a URL does not
   * (`/installation/repositories` names none). Never told the enterprise PAT's answers: they
   * spend the token owner's budget, no App's.
   */
  readonly onInstallationAnswer?: (account: string, status: number, header: HeaderLookup) => void;
}

export type { ListTruncated } from './rate-limit';

/** A GitHub answer with its headers (the reconciler reads `x-ratelimit-*` from them). */
export interface GitHubAnswer {
  readonly status: number;
  readonly data: unknown;
  readonly headers: Readonly<Record<string, string | undefined>>;
}

/** Which rate limit a call counts against: the App's own (JWT) or its installation's (token). */
export type GitHubCredential = 'app' | 'installation';

/** Told the headers of every answer GitHub gives (success or error), with the credential used. */
export type GitHubAnswerObserver = (credential: GitHubCredential, headers: Readonly<Record<string, string | undefined>>) => void;

export class GitHubApiError extends Error {
  constructor(
    readonly operation: string,
    readonly status: number,
    detail: string,
    /** The account (lower case) whose installation a failed installation look-up asked for. */
    readonly account?: string,
  ) {
    super(`GitHub ${operation} failed: ${status === 0 ? detail : `HTTP ${status}${detail ? ` (${detail})` : ''}`}`);
    this.name = 'GitHubApiError';
  }
}

/**
 * The runner group of a repository-level runner: repositories have only the default group
 * (id 1); groups are an organisation's (docs: "Create configuration for a just-in-time runner
 * for a repository", `runner_group_id` required).
 */
const REPOSITORY_RUNNER_GROUP_ID = 1;

interface CachedToken {
  readonly token: string;
  readonly expiresAt: number;
}

type Request = typeof octokitRequest;
type AppAuth = ReturnType<typeof createAppAuth>;

/** States in which a workflow job still waits for a runner. */
const WAITING_STATUSES = new Set(['queued', 'waiting', 'pending', 'requested']);

/**
 * GitHub Actions through a GitHub App: just-in-time runner configs (`generate-jitconfig`),
 * runner deletion and listing, job lookup. Installation tokens are cached per installation,
 * replaced before they expire; rate-limit answers are waited out within a bound.
 *
 * Each pool registers where its scope says (github-scopes.ts): its organisation (each with
 * its own installation of the App), the job's repository, or an enterprise. Runner ids name
 * the scope, since deleting a runner needs it (github-scopes.ts `runnerIdOf`).
 */
export class GitHubProvider implements CiProvider {
  readonly provider = Provider.GITHUB;
  private readonly request: Request;
  private readonly policy: RetryPolicy;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly now: () => number;
  private auth: Promise<AppAuth> | undefined;
  private readonly installations = new Map<string, Promise<number>>();
  private readonly tokens = new Map<number, CachedToken>();
  /** Tokens being minted, so concurrent calls for one installation share one mint. */
  private readonly minting = new Map<number, Promise<string>>();

  constructor(private readonly options: GitHubProviderOptions) {
    this.request = octokitRequest.defaults({
      baseUrl: options.github.apiUrl.replace(/\/+$/, ''),
      headers: { 'user-agent': 'cdk-warm-runners', 'x-github-api-version': '2022-11-28' },
      request: { fetch: boundedFetch(options.fetch ?? globalThis.fetch, options.timeoutMs ?? 10_000) },
    });
    this.policy = { ...DEFAULT_RETRY_POLICY, ...options.retry };
    this.sleep = options.sleep ?? realSleep;
    this.now = options.now ?? Date.now;
  }

  /**
   * `scoped` (reuse): a repository-level runner of the job's repository, also in an
   * organisation fleet (`POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig`, with
   * the organisation's installation token; the App needs repository "Administration: write").
   * Repository runners have no runner groups of the organisation: their group is the default
   * one, id 1.
   */
  async createRunner(job: JobMessage, instanceId: string, pool: string, options: CreateRunnerOptions = {}): Promise<RunnerRegistration> {
    const config = this.options.pools.find((p) => p.name === pool);
    if (!config || config.provider !== 'github') throw new Error(`pool "${pool}" is not a GitHub pool of this fleet`);
    const poolScope = registrationScope(this.options.github, config, job);
    // Lower case, as the affinity and `listRunners({ repositories })`: the runner id (tagged on
    // the instance, matched against the list by the sweep) is then spelled one way.
    const scope: Scope = options.scoped ? { kind: 'repo', owner: job.owner.toLowerCase(), repo: job.project.toLowerCase() } : poolScope;
    const groupId = options.scoped && poolScope.kind !== 'repo' ? REPOSITORY_RUNNER_GROUP_ID : this.options.github.runnerGroupId;
    const name = runnerName(this.options.prefix, instanceId, new Date(this.now()));
    const labels = [GITHUB_SELF_HOSTED_LABEL, ...config.labels.filter((l) => l.toLowerCase() !== GITHUB_SELF_HOSTED_LABEL)];
    const route = `POST ${scopeRoute(scope)}/actions/runners/generate-jitconfig`;
    // Not retried on 5xx: GitHub may have registered the runner; the sweep removes one that leaked.
    const params = { ...scopeParams(scope), name, runner_group_id: groupId, labels, work_folder: '_work' };
    const data = (await this.call('generate-jitconfig', this.tokenScope(scope), route, params, false)) as {
      runner?: { id?: unknown };
      encoded_jit_config?: unknown;
    };
    const id = data?.runner?.id;
    if (!Number.isSafeInteger(id) || typeof data.encoded_jit_config !== 'string' || data.encoded_jit_config === '') {
      throw new GitHubApiError('generate-jitconfig', 201, 'answer lacks runner.id or encoded_jit_config');
    }
    return { runnerId: runnerIdOf(scope, id as number, this.options.github.organization), name, secret: data.encoded_jit_config };
  }

  async deleteRunner(runnerId: string): Promise<void> {
    const { scope, id } = parseRunnerId(runnerId, this.options.github.organization);
    const route = `DELETE ${scopeRoute(scope)}/actions/runners/{runner_id}`;
    try {
      await this.call('delete runner', this.tokenScope(scope), route, { ...scopeParams(scope), runner_id: id }, true);
    } catch (e) {
      // Only the DELETE's own 404 means gone: a 404 of the installation look-up (the App is not
      // installed there) leaves the registration behind, and must fail so the sweep retries.
      if (e instanceof GitHubApiError && e.status === 404 && e.operation === 'delete runner') return;
      throw e;
    }
  }

  /**
   * The fleet's runners: those of every organisation, repository and enterprise its pools
   * register at (each listed once, however many pools share it); and the
   * repository-level runners of `options.repositories` (scoped runners of an organisation
   * fleet, which GitHub lists per repository only). A runner id names its scope, so a runner
   * seen in two listings is reported once.
   */
  async listRunners(options: ListRunnersOptions = {}): Promise<RunnerSummary[]> {
    const own = runnerScopes(this.options.github, this.options.pools);
    const keys = new Set(own.map(installationKey));
    const extra = (options.repositories ?? []).filter((r) => /^[\w.-]+\/[\w.-]+$/.test(r)).map((r) => repoScope(r.toLowerCase())).filter((s) => !keys.has(installationKey(s)) && keys.add(installationKey(s)));
    const out: RunnerSummary[] = [];
    const maxPages = this.options.maxPages ?? 20;
    for (const scope of [...own, ...extra]) {
      const route = `GET ${scopeRoute(scope)}/actions/runners`;
      let complete = false;
      for (let page = 1; page <= maxPages; page++) {
        const data = (await this.call('list runners', this.tokenScope(scope), route, { ...scopeParams(scope), per_page: 100, page }, true)) as { runners?: unknown };
        if (!Array.isArray(data?.runners)) throw new GitHubApiError('list runners', 200, 'answer lacks runners');
        for (const r of data.runners as Record<string, unknown>[]) {
          if (typeof r.name !== 'string' || instanceIdOfRunnerName(this.options.prefix, r.name) === undefined || !Number.isSafeInteger(r.id)) continue;
          out.push({
            runnerId: runnerIdOf(scope, r.id as number, this.options.github.organization),
            name: r.name,
            status: typeof r.status === 'string' ? r.status : 'unknown',
            ...(typeof r.busy === 'boolean' ? { busy: r.busy } : {}),
          });
        }
        if (data.runners.length < 100) {
          complete = true;
          break;
        }
      }
      // A full last page: there may be more runners than the cap lets us read.
      if (!complete) this.options.onListTruncated?.({ scope: installationKey(scope), pages: maxPages });
    }
    return out;
  }

  async isJobQueued(job: JobMessage): Promise<boolean> {
    if (job.provider !== 'github' || !/^\d+$/.test(job.providerJobId)) throw new Error(`job ${job.jobId} is not a GitHub job`);
    const data = await this.lookUpJob(job);
    return typeof data.status === 'string' && WAITING_STATUSES.has(data.status);
  }

  async resolveLabels(job: JobMessage): Promise<string[]> {
    const data = await this.lookUpJob(job);
    if (!Array.isArray(data.labels)) throw new GitHubApiError('look up job', 200, 'answer lacks labels');
    return data.labels.filter((l): l is string => typeof l === 'string');
  }

  /** The job as GitHub shows it; 404 (gone, or the App cannot see the repository) is a JobLookupError. */
  private async lookUpJob(job: JobMessage): Promise<Record<string, unknown>> {
    const repo: Scope = { kind: 'repo', owner: job.owner, repo: job.project };
    try {
      const data = await this.call('look up job', this.tokenScope(repo), 'GET /repos/{owner}/{repo}/actions/jobs/{job_id}', { ...scopeParams(repo), job_id: Number(job.providerJobId) }, true);
      return (data ?? {}) as Record<string, unknown>;
    } catch (e) {
      // The job's own 404, not the installation look-up's (an App not installed there knows nothing of the job).
      if (e instanceof GitHubApiError && e.status === 404 && e.operation === 'look up job') throw new JobLookupError(Provider.GITHUB, job.jobId, 'not-found');
      throw e;
    }
  }

  /** An organisation runner takes any job of its organisation; a repository runner only its repository's. */
  runnerServes(runnerId: string, job: JobMessage): boolean {
    try {
      return scopeTakesJob(parseRunnerId(runnerId, this.options.github.organization).scope, job);
    } catch {
      return false;
    }
  }

  /**
   * The scope whose installation token a call uses: a repository of an organisation the fleet
   * serves (a scoped runner's, a job's) is covered by that organisation's installation, so no
   * second installation look-up or token is needed.
   */
  private tokenScope(scope: Scope): Scope {
    if (scope.kind === 'repo' && servedOrganizations(this.options.github, this.options.pools).has(scope.owner.toLowerCase())) return { kind: 'org', org: scope.owner };
    return scope;
  }

  /**
   * For the reconciler: one call to an App route (`/app/...`) with the App's JWT. Not retried
   * on 5xx when `retryServerErrors` is false (a POST whose outcome a 5xx leaves unknown).
   */
  async appRequest(operation: string, route: string, params: Record<string, unknown>, retryServerErrors: boolean, observe?: GitHubAnswerObserver): Promise<GitHubAnswer> {
    const policy = { ...this.policy, retryServerErrors };
    for (let attempt = 1; ; attempt++) {
      const auth = await this.appAuth();
      const { token } = await auth({ type: 'app' });
      try {
        const res = await this.request(route, { ...params, headers: { authorization: `bearer ${token}` } });
        const headers = plainHeaders(res.headers);
        observe?.('app', headers);
        return { status: res.status, data: res.data, headers };
      } catch (e) {
        if (!(e instanceof RequestError) || !e.response) throw transportError(operation, e);
        const headers = plainHeaders(e.response.headers);
        observe?.('app', headers);
        if (e.status === 401) this.keyRefused();
        const advice = adviseRetry(e.status, (h) => headers[h], this.now(), attempt, policy);
        if (e.status === 401 || !advice.retry) throw new GitHubApiError(operation, e.status, errorDetail(e, advice.retry ? '' : advice.why));
        await this.sleep(advice.waitMs);
      }
    }
  }

  /**
   * For the reconciler: one GET with the installation token of `target`: an organisation's
   * login, or an "owner/repo" (its organisation's installation when the fleet serves that
   * organisation, else the repository's); absent, the connection's organisation or first repository.
   */
  async installationRequest(operation: string, route: string, params: Record<string, unknown>, target?: string, observe?: GitHubAnswerObserver): Promise<GitHubAnswer> {
    const { github } = this.options;
    const named = target ?? github.organization ?? github.repositories[0] ?? '';
    const scope: Scope = named.includes('/') ? this.tokenScope(repoScope(named)) : { kind: 'org', org: named };
    return this.callWithHeaders(operation, scope, route, params, true, observe);
  }

  /** One API call with an installation token, rate limits waited out within the bound. */
  private async call(operation: string, scope: Scope, route: string, params: Record<string, unknown>, retryServerErrors: boolean): Promise<unknown> {
    return (await this.callWithHeaders(operation, scope, route, params, retryServerErrors)).data;
  }

  private async callWithHeaders(
    operation: string,
    scope: Scope,
    route: string,
    params: Record<string, unknown>,
    retryServerErrors: boolean,
    observe?: GitHubAnswerObserver,
  ): Promise<GitHubAnswer> {
    const policy = { ...this.policy, retryServerErrors };
    let refreshed = false;
    for (let attempt = 1; ; attempt++) {
      const { installationId, token } = scope.kind === 'enterprise' ? await this.enterpriseCredential() : await this.installationToken(scope);
      try {
        const res = await this.request(route, { ...params, headers: { authorization: `token ${token}` } });
        const headers = plainHeaders(res.headers);
        observe?.('installation', headers);
        this.installationAnswer(scope, res.status, headers);
        return { status: res.status, data: res.data, headers };
      } catch (e) {
        // Octokit reports a transport failure (timeout, refused connection) as a RequestError without a response.
        if (!(e instanceof RequestError) || !e.response) throw transportError(operation, e);
        observe?.('installation', plainHeaders(e.response.headers));
        this.installationAnswer(scope, e.status, plainHeaders(e.response.headers));
        if (e.status === 401) {
          // The token was revoked or expired early: forget it (unless a concurrent call already
          // replaced it) and retry once with a fresh one. A 401 means GitHub did nothing, so even
          // generate-jitconfig is safe to repeat.
          if (scope.kind === 'enterprise') this.options.invalidateEnterpriseToken?.();
          else if (this.tokens.get(installationId)?.token === token) this.tokens.delete(installationId);
          if (!refreshed) {
            refreshed = true;
            attempt--;
            continue;
          }
        }
        const headers = e.response?.headers ?? {};
        const advice = adviseRetry(e.status, (h) => headerValue(headers, h), this.now(), attempt, policy);
        if (!advice.retry) throw new GitHubApiError(operation, e.status, errorDetail(e, advice.why));
        await this.sleep(advice.waitMs);
      }
    }
  }

  private installationAnswer(scope: Scope, status: number, headers: Readonly<Record<string, string | undefined>>): void {
    if (scope.kind === 'enterprise' || !this.options.onInstallationAnswer) return;
    this.options.onInstallationAnswer(accountOf(scope), status, (h) => headers[h]);
  }

  /** The enterprise runner routes' credential: the classic PAT (no installation; id -1 marks it). */
  private async enterpriseCredential(): Promise<{ installationId: number; token: string }> {
    if (!this.options.enterpriseToken) throw new GitHubApiError('enterprise runners', 0, 'no enterprise token is configured');
    return { installationId: -1, token: await this.options.enterpriseToken() };
  }

  /** GitHub refused the App's JWT: build the auth again from a freshly read key next time. */
  private keyRefused(): void {
    this.auth = undefined;
    this.options.invalidatePrivateKey?.();
  }

  private appAuth(): Promise<AppAuth> {
    this.auth ??= this.options
      .privateKey()
      .then((privateKey) =>
        createAppAuth({
          appId: this.options.github.appId,
          privateKey,
          request: this.request,
          // auth-app would otherwise write to console; its warnings carry no secret, but we keep them out.
          log: { warn: () => undefined },
        }),
      )
      .catch((e: unknown) => {
        this.auth = undefined;
        throw e;
      });
    return this.auth;
  }

  /** The installation of the App on the scope's account or repository, looked up once. */
  private installationId(scope: Scope): Promise<number> {
    const key = installationKey(scope);
    let found = this.installations.get(key);
    if (!found) {
      found = (async () => {
        const auth = await this.appAuth();
        const { token } = await auth({ type: 'app' });
        const route = `GET ${scopeRoute(scope)}/installation`;
        try {
          const res = await this.request(route, { ...scopeParams(scope), headers: { authorization: `bearer ${token}` } });
          const id = (res.data as { id?: unknown }).id;
          if (!Number.isSafeInteger(id)) throw new GitHubApiError('look up installation', res.status, 'answer lacks id');
          return id as number;
        } catch (e) {
          if (e instanceof RequestError && e.response) {
            if (e.status === 401) this.keyRefused();
            throw new GitHubApiError('look up installation', e.status, errorDetail(e, 'is the App installed there?'), accountOf(scope));
          }
          if (e instanceof GitHubApiError) throw e;
          throw transportError('look up installation', e);
        }
      })();
      found.catch(() => this.installations.delete(key));
      this.installations.set(key, found);
      while (this.installations.size > (this.options.maxCachedInstallations ?? 32)) this.installations.delete(this.installations.keys().next().value as string);
    }
    return found;
  }

  /** A token valid for at least the refresh margin, minted by auth-app when needed. */
  private async installationToken(scope: Scope): Promise<{ installationId: number; token: string }> {
    const installationId = await this.installationId(scope);
    const cached = this.tokens.get(installationId);
    const margin = this.options.tokenRefreshMarginMs ?? 5 * 60_000;
    if (cached && cached.expiresAt - this.now() > margin) {
      this.tokens.delete(installationId);
      this.tokens.set(installationId, cached);
      return { installationId, token: cached.token };
    }
    // Single flight: a burst of createRunner calls on a cold container mints one token, not N.
    let minting = this.minting.get(installationId);
    if (!minting) {
      minting = this.mintToken(scope, installationId).finally(() => this.minting.delete(installationId));
      this.minting.set(installationId, minting);
    }
    return { installationId, token: await minting };
  }

  private async mintToken(scope: Scope, installationId: number): Promise<string> {
    const auth = await this.appAuth();
    let minted: { token: string; expiresAt: string };
    try {
      // refresh: auth-app keeps its own cache for 59 minutes; we decide when to replace a token.
      minted = (await auth({ type: 'installation', installationId, refresh: true })) as { token: string; expiresAt: string };
    } catch (e) {
      if (e instanceof RequestError && e.response) {
        // 404: the App was uninstalled (and maybe installed again under a new id); 401: the JWT
        // was refused, possibly for this installation. Either way look the installation up again.
        if (e.status === 404 || e.status === 401) this.installations.delete(installationKey(scope));
        // The JWT was refused (a rotated or revoked key): read the key again on the next call.
        if (e.status === 401) this.keyRefused();
        throw new GitHubApiError('create installation token', e.status, errorDetail(e, ''));
      }
      throw transportError('create installation token', e);
    }
    this.tokens.set(installationId, { token: minted.token, expiresAt: Date.parse(minted.expiresAt) });
    while (this.tokens.size > (this.options.maxCachedInstallations ?? 32)) this.tokens.delete(this.tokens.keys().next().value as number);
    return minted.token;
  }

  /** For tests: how many installation tokens are cached. */
  get cachedTokenCount(): number {
    return this.tokens.size;
  }
}

/** The account (lower case) whose App installation serves a scope. */
function accountOf(scope: Scope): string {
  return (scope.kind === 'org' ? scope.org : scope.kind === 'repo' ? scope.owner : scope.enterprise).toLowerCase();
}

function transportError(operation: string, e: unknown): GitHubApiError {
  const cause = e instanceof Error && e.cause instanceof Error ? e.cause : e;
  const timedOut = cause instanceof Error && (cause.name === 'TimeoutError' || cause.name === 'AbortError');
  return new GitHubApiError(operation, 0, timedOut ? 'timed out' : `request failed (${cause instanceof Error ? cause.name : 'unknown'})`);
}

/** Octokit's response headers as lower-case names and string values. */
function plainHeaders(headers: Record<string, unknown>): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const name of Object.keys(headers)) out[name.toLowerCase()] = headerValue(headers, name);
  return out;
}

function headerValue(headers: Record<string, unknown>, name: string): string | undefined {
  const v = headers[name];
  return typeof v === 'string' ? v : typeof v === 'number' ? String(v) : undefined;
}

/** GitHub's error message, short and printable; never the request (which carries the token). */
function errorDetail(e: RequestError, why: string): string {
  const data = e.response?.data as { message?: unknown } | undefined;
  const message = typeof data?.message === 'string' ? data.message.replace(/[^\x20-\x7e]/g, '?').slice(0, 160) : '';
  return [message, why].filter(Boolean).join('; ');
}
