import { RateBudget } from '../reconcile/rate-budget';
import {
  githubPoolScope,
  Provider,
  type CiProvider,
  type CreateRunnerOptions,
  type JobMessage,
  type ListRunnersOptions,
  type RunnerRegistration,
  type RunnerSummary,
} from '../shared/contract';
import { parseRunnerId } from './github-scopes';
import { GitHubApiError, GitHubProvider, type GitHubAnswer, type GitHubAnswerObserver, type GitHubProviderOptions } from './github';
import { rateLimitWaitMs, type HeaderLookup } from './rate-limit';

/**
 * Several GitHub Apps installed on the same organisations and repositories, whose rate limits
 * share the load. GitHub counts an installation token's requests per installation, and each
 * App has an installation of its own where it is installed; JWT requests count per App
 * (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api): two Apps
 * are two budgets. Each provider operation spends the App with the most left of the budget it
 * spends, as the `x-ratelimit-*` headers of that App's latest answers tell; an App refused for
 * its rate limit is skipped until its reset, and the operation moves on to the next App.
 */

/**
 * The budget a call spends: the App's own (its JWT: installation look-ups, token mints, `/app`
 * routes) or its installation on one account (every call with an installation token).
 */
export type AppBudgetKey = 'app' | `installation:${string}`;

/** The installation budget of the account `owner` (an App has one installation per account). */
export function installationBudget(owner: string): AppBudgetKey {
  return `installation:${owner.toLowerCase()}`;
}

/**
 * How long a budget read as spent (remaining 0) without a reset time counts as exhausted:
 * GitHub Enterprise Server may send no `x-ratelimit-reset`, and a budget never seen again must
 * not stay skipped for the container's life.
 */
const EXHAUSTED_WITHOUT_RESET_MS = 60_000;

/** How long an App answered "not installed" (404 to the installation look-up) on an account is not chosen for it. */
const NOT_INSTALLED_MS = 10 * 60_000;
/** Accounts remembered as lacking an App, at most (the oldest is forgotten first). */
const NOT_INSTALLED_MAX = 128;

/** One App's figures for the metrics: its most spent budget (lowest fraction left). */
export interface AppRateFigures {
  readonly appId: string;
  readonly remaining: number;
  readonly limit: number;
}

/**
 * What each App has left of each budget it spent, from its answers; pure over the clock. An App
 * or budget not heard from counts as whole, and so does one past its reset.
 */
export class AppBudgets {
  private readonly budget = new RateBudget(0, 0);
  /** App and budget -> epoch ms until which GitHub refused it for its rate limit. */
  private readonly refusedUntil = new Map<string, number>();
  /** Per App, the budgets it has answers for. */
  private readonly keys = new Map<string, Set<AppBudgetKey>>();
  /** App and budget -> epoch ms of its latest figures. */
  private readonly observedAt = new Map<string, number>();

  constructor(
    readonly appIds: readonly string[],
    private readonly now: () => number,
  ) {}

  /** One answer of `appId` spending `key`, with its status (a 403/429 rate-limit answer skips the App until its wait is over). */
  observe(appId: string, key: AppBudgetKey, status: number, header: HeaderLookup): void {
    // A refused credential's answer carries the unauthenticated limit (60 an hour), not the App's.
    if (status === 401) return;
    const id = `${appId} ${key}`;
    const before = this.budget.figures(id);
    this.budget.observe(id, header);
    if (this.budget.figures(id) !== before) this.observedAt.set(id, this.now());
    let keys = this.keys.get(appId);
    if (!keys) this.keys.set(appId, (keys = new Set()));
    keys.add(key);
    const wait = rateLimitWaitMs(status, header, this.now());
    if (wait !== undefined) this.refusedUntil.set(id, this.now() + wait);
  }

  /** Whether `appId` must not spend `key` now: refused for its rate limit, or nothing left, until its reset. */
  exhausted(appId: string, key: AppBudgetKey): boolean {
    const id = `${appId} ${key}`;
    if ((this.refusedUntil.get(id) ?? 0) > this.now()) return true;
    const f = this.budget.figures(id);
    if (f === undefined || f.remaining > 0) return false;
    return (f.resetAtMs ?? (this.observedAt.get(id) ?? 0) + EXHAUSTED_WITHOUT_RESET_MS) > this.now();
  }

  /** What `appId` has left of `key`: Infinity when unknown (counts as full), its limit once past the reset. */
  left(appId: string, key: AppBudgetKey): number {
    const f = this.budget.figures(`${appId} ${key}`);
    if (!f) return Infinity;
    return f.resetAtMs !== undefined && f.resetAtMs <= this.now() ? f.limit : f.remaining;
  }

  /**
   * The App to spend `key` on, among `candidates`: the one with the most left, skipping the
   * exhausted; ties go to the earlier App. `key` undefined (an operation over several
   * installations): the App whose least installation budget is largest.
   */
  choose(candidates: readonly string[], key: AppBudgetKey | undefined): string | undefined {
    let best: { appId: string; left: number } | undefined;
    for (const appId of candidates) {
      if (key !== undefined && this.exhausted(appId, key)) continue;
      const left = key !== undefined ? this.left(appId, key) : Math.min(Infinity, ...[...(this.keys.get(appId) ?? [])].filter((k) => k !== 'app').map((k) => this.left(appId, k)));
      if (!best || left > best.left) best = { appId, left };
    }
    return best?.appId;
  }

  /** The App among `candidates` whose refusal or reset of `key` ends first (all are exhausted: the one to try anyway). */
  soonest(candidates: readonly string[], key: AppBudgetKey | undefined): string {
    const until = (appId: string) => {
      if (key === undefined) return 0;
      const id = `${appId} ${key}`;
      return Math.max(this.refusedUntil.get(id) ?? 0, this.budget.figures(id)?.resetAtMs ?? 0);
    };
    return [...candidates].sort((a, b) => until(a) - until(b))[0]!;
  }

  /** Whether GitHub refused `appId` for its rate limit at or after `sinceMs` (any budget). */
  refusedSince(appId: string, sinceMs: number): boolean {
    for (const key of this.keys.get(appId) ?? []) {
      const until = this.refusedUntil.get(`${appId} ${key}`);
      if (until !== undefined && until >= sinceMs) return true;
    }
    return false;
  }

  /**
   * Per App heard from, its most spent budget (a budget past its reset counts as whole), from
   * the `x-ratelimit-*` figures alone: a secondary rate limit (`retry-after`) skips the App in
   * the choice for its wait, but says nothing of its hourly budget, which the alarm watches.
   */
  figures(): AppRateFigures[] {
    const out: AppRateFigures[] = [];
    for (const appId of this.appIds) {
      let worst: AppRateFigures | undefined;
      for (const key of this.keys.get(appId) ?? []) {
        const f = this.budget.figures(`${appId} ${key}`);
        if (!f) continue; // answers without rate-limit headers (GitHub Enterprise Server with limits off)
        const remaining = Math.min(f.limit, this.left(appId, key));
        if (!worst || remaining / f.limit < worst.remaining / worst.limit) worst = { appId, remaining, limit: f.limit };
      }
      if (worst) out.push(worst);
    }
    return out;
  }

  /** The largest fraction of its limit any App has left (an App not heard from counts as 1): the alarm's figure. */
  bestRemainingFraction(): number {
    const heard = new Map(this.figures().map((f) => [f.appId, f.remaining / f.limit]));
    return Math.max(...this.appIds.map((id) => heard.get(id) ?? 1));
  }
}

/** One App: its id and its key's source (each App's key is its own SSM parameter). */
export interface GitHubAppCredentials {
  readonly appId: string;
  readonly privateKey: () => Promise<string>;
  /** Called when GitHub refused this App's JWT (401): only this App's key is read again. */
  readonly invalidatePrivateKey?: () => void;
}

export interface GitHubAppsOptions extends Omit<GitHubProviderOptions, 'privateKey' | 'invalidatePrivateKey'> {
  /** The Apps, the first being `github.appId` (the one with the webhook: `/app/hook` routes are its). */
  readonly apps: readonly GitHubAppCredentials[];
  /**
   * Told every App's figures after an answer (the metrics: lambdas/ci/index.ts): at most once per
   * `figuresIntervalMs` while the best App has more than `figuresEveryAnswerBelow` of its limit
   * left, after every answer once it has less or an App was refused, so the low figures that
   * page always reach the alarm.
   */
  readonly onFigures?: (figures: AppRateFigures[], bestRemainingFraction: number) => void;
  readonly figuresIntervalMs?: number;
  readonly figuresEveryAnswerBelow?: number;
  /** Told when an App answered that it is not installed on an account (it is not chosen there for a while): the log line. */
  readonly onNotInstalled?: (appId: string, account: string) => void;
}

/**
 * The GitHub provider over several Apps: one `GitHubProvider` per App (its own key, JWT,
 * installations and tokens), each operation handed to the App `AppBudgets` chooses. With one
 * App it behaves as that App's provider, and still reports its figures.
 */
export class GitHubApps implements CiProvider {
  readonly provider = Provider.GITHUB;
  readonly budgets: AppBudgets;
  private readonly providers = new Map<string, GitHubProvider>();
  private readonly appIds: string[];
  private readonly now: () => number;
  private lastFiguresAt = -Infinity;
  /** "App account" -> epoch ms until which the App counts as not installed on the account. */
  private readonly notInstalledUntil = new Map<string, number>();

  constructor(private readonly options: GitHubAppsOptions) {
    if (options.apps.length === 0) throw new Error('GitHubApps needs at least one App');
    this.appIds = options.apps.map((a) => a.appId);
    this.now = options.now ?? Date.now;
    this.budgets = new AppBudgets(this.appIds, this.now);
    const base = options.fetch ?? globalThis.fetch;
    for (const app of options.apps) {
      const { apps: _apps, onFigures: _onFigures, figuresIntervalMs: _interval, figuresEveryAnswerBelow: _below, onNotInstalled: _notInstalled, ...shared } = options;
      this.providers.set(
        app.appId,
        new GitHubProvider({
          ...shared,
          github: { ...options.github, appId: app.appId },
          privateKey: app.privateKey,
          ...(app.invalidatePrivateKey ? { invalidatePrivateKey: app.invalidatePrivateKey } : {}),
          fetch: this.observingFetch(app.appId, base),
          onInstallationAnswer: (account, status, header) => this.observe(app.appId, installationBudget(account), status, header),
        }),
      );
    }
  }

  createRunner(job: JobMessage, instanceId: string, pool: string, options?: CreateRunnerOptions): Promise<RunnerRegistration> {
    // An enterprise runner registers with the PAT, whichever App: no App's budget to choose by.
    if (!options?.scoped && this.registersAtEnterprise(job, pool)) return this.first.createRunner(job, instanceId, pool, options);
    // A rate-limit refusal means GitHub registered nothing: the next App may try.
    return this.spend(installationBudget(job.owner), (p) => p.createRunner(job, instanceId, pool, options));
  }

  deleteRunner(runnerId: string): Promise<void> {
    const { scope } = parseRunnerId(runnerId, this.options.github.organization);
    if (scope.kind === 'enterprise') return this.first.deleteRunner(runnerId);
    return this.spend(installationBudget(scope.kind === 'org' ? scope.org : scope.owner), (p) => p.deleteRunner(runnerId));
  }

  listRunners(options?: ListRunnersOptions): Promise<RunnerSummary[]> {
    return this.spend(undefined, (p) => p.listRunners(options));
  }

  isJobQueued(job: JobMessage): Promise<boolean> {
    return this.spend(installationBudget(job.owner), (p) => p.isJobQueued(job));
  }

  resolveLabels(job: JobMessage): Promise<string[]> {
    return this.spend(installationBudget(job.owner), (p) => p.resolveLabels(job));
  }

  runnerServes(runnerId: string, job: JobMessage): boolean {
    return this.first.runnerServes(runnerId, job);
  }

  /**
   * `/app/hook/...` (the reconciler's deliveries) belong to the App with the webhook, the first:
   * another App would list its own (empty) deliveries. Spent on that App alone.
   */
  appRequest(operation: string, route: string, params: Record<string, unknown>, retryServerErrors: boolean, observe?: GitHubAnswerObserver): Promise<GitHubAnswer> {
    return this.first.appRequest(operation, route, params, retryServerErrors, observe);
  }

  installationRequest(operation: string, route: string, params: Record<string, unknown>, repository?: string, observe?: GitHubAnswerObserver): Promise<GitHubAnswer> {
    const owner = repository?.split('/')[0] ?? this.options.github.organization ?? this.options.github.repositories[0]?.split('/')[0];
    return this.spend(owner === undefined ? undefined : installationBudget(owner), (p) => p.installationRequest(operation, route, params, repository, observe));
  }

  private get first(): GitHubProvider {
    return this.providers.get(this.appIds[0]!)!;
  }

  private registersAtEnterprise(job: JobMessage, pool: string): boolean {
    const config = this.options.pools.find((p) => p.name === pool);
    return config?.provider === Provider.GITHUB && githubPoolScope(this.options.github, config).enterprise !== undefined;
  }

  /** Whether `appId` answered lately that it is not installed on `account`. */
  private notInstalled(appId: string, account: string): boolean {
    const key = `${appId} ${account}`;
    const until = this.notInstalledUntil.get(key);
    if (until !== undefined && until <= this.now()) this.notInstalledUntil.delete(key);
    return until !== undefined && until > this.now();
  }

  private rememberNotInstalled(appId: string, account: string): void {
    const key = `${appId} ${account}`;
    this.notInstalledUntil.delete(key);
    this.notInstalledUntil.set(key, this.now() + NOT_INSTALLED_MS);
    while (this.notInstalledUntil.size > NOT_INSTALLED_MAX) this.notInstalledUntil.delete(this.notInstalledUntil.keys().next().value as string);
    this.options.onNotInstalled?.(appId, account);
  }

  /** The Apps a call on `key` may go to: those not known to lack an installation on its account (an operation over several accounts: on any). */
  private installedCandidates(key: AppBudgetKey | undefined): string[] {
    const account = key?.startsWith('installation:') ? key.slice('installation:'.length) : undefined;
    const lacking = (id: string) => (account !== undefined ? this.notInstalled(id, account) : [...this.notInstalledUntil].some(([k, until]) => k.startsWith(`${id} `) && until > this.now()));
    const fit = this.appIds.filter((id) => !lacking(id));
    // Over several accounts, no App installed on all of them: try them all, as before.
    return fit.length > 0 || account !== undefined ? fit : [...this.appIds];
  }

  /**
   * Runs `call` on the App with the most left of `key`; an App refused for its rate limit
   * during the call is left for the next. When every App is exhausted, the call goes to the
   * one whose reset comes first, which fails (or waits within its bound) as one App does.
   */
  private async spend<T>(key: AppBudgetKey | undefined, call: (p: GitHubProvider) => Promise<T>): Promise<T> {
    const tried = new Set<string>();
    let refusal: unknown;
    for (;;) {
      const installed = this.installedCandidates(key);
      if (installed.length === 0) {
        // Every App answered lately that it is not installed there: fail as the look-up did, without asking again.
        throw refusal ?? new GitHubApiError('look up installation', 404, `no App of the fleet is installed on "${key!.slice('installation:'.length)}" (answered within the last ${NOT_INSTALLED_MS / 60_000} minutes)`);
      }
      let appId = this.budgets.choose(
        installed.filter((id) => !tried.has(id)),
        key,
      );
      if (appId === undefined) {
        if (refusal !== undefined) throw refusal;
        appId = this.budgets.soonest(installed, key);
      }
      tried.add(appId);
      const startedAt = this.now();
      try {
        return await call(this.providers.get(appId)!);
      } catch (e) {
        // 404 to the installation look-up: this App is not installed on the account; another may be.
        if (e instanceof GitHubApiError && e.operation === 'look up installation' && e.status === 404 && e.account !== undefined) {
          this.rememberNotInstalled(appId, e.account);
          refusal = e;
          continue;
        }
        const rateLimited = e instanceof GitHubApiError && (e.status === 403 || e.status === 429) && this.budgets.refusedSince(appId, startedAt);
        if (!rateLimited || tried.size >= this.appIds.length) throw e;
        refusal = e;
      }
    }
  }

  /**
   * The App's fetch, telling `budgets` the rate-limit headers of every answer to the App's JWT
   * (a bearer token is always the App's own budget: look-ups, token mints, `/app` routes).
   * Answers to tokens are told by the provider, which knows the installation they spend.
   */
  private observingFetch(appId: string, base: typeof fetch): typeof fetch {
    return async (input, init) => {
      const res = await base(input, init);
      const auth = new Headers(init?.headers).get('authorization') ?? '';
      if (/^bearer /i.test(auth)) this.observe(appId, 'app', res.status, (h) => res.headers.get(h) ?? undefined);
      return res;
    };
  }

  private observe(appId: string, key: AppBudgetKey, status: number, header: HeaderLookup): void {
    this.budgets.observe(appId, key, status, header);
    this.reportFigures(status === 403 || status === 429);
  }

  private reportFigures(refused: boolean): void {
    if (!this.options.onFigures) return;
    const at = this.now();
    const best = this.budgets.bestRemainingFraction();
    const urgent = refused || best < (this.options.figuresEveryAnswerBelow ?? 0);
    if (!urgent && at - this.lastFiguresAt < (this.options.figuresIntervalMs ?? 60_000)) return;
    this.lastFiguresAt = at;
    this.options.onFigures(this.budgets.figures(), best);
  }
}

