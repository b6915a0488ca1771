import { RateBudget } from '../reconcile/rate-budget';
import {
  Provider,
  type CiProvider,
  type CreateRunnerOptions,
  type JobMessage,
  type ListRunnersOptions,
  type RunnerRegistration,
  type RunnerSummary,
} from '../shared/contract';
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

  constructor(
    readonly appIds: readonly string[],
    private readonly now: () => number,
  ) {}

  /** One answer of `appId` spending `key`, with its status (a 403/429 rate-limit answer skips the App until its wait is over). */
  observe(appId: string, key: AppBudgetKey, status: number, header: HeaderLookup): void {
    const id = `${appId} ${key}`;
    this.budget.observe(id, header);
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
    return f !== undefined && f.remaining <= 0 && (f.resetAtMs === undefined || f.resetAtMs > this.now());
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

  /** Per App heard from, its most spent budget (a budget past its reset counts as whole). */
  figures(): AppRateFigures[] {
    const out: AppRateFigures[] = [];
    for (const appId of this.appIds) {
      let worst: AppRateFigures | undefined;
      for (const key of this.keys.get(appId) ?? []) {
        const f = this.budget.figures(`${appId} ${key}`);
        if (!f) continue; // answers without rate-limit headers (GitHub Enterprise Server with limits off)
        const remaining = this.exhausted(appId, key) ? 0 : Math.min(f.limit, this.left(appId, key));
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

  constructor(private readonly options: GitHubAppsOptions) {
    if (options.apps.length === 0) throw new Error('GitHubApps needs at least one App');
    this.appIds = options.apps.map((a) => a.appId);
    this.now = options.now ?? Date.now;
    this.budgets = new AppBudgets(this.appIds, this.now);
    const base = options.fetch ?? globalThis.fetch;
    for (const app of options.apps) {
      const { apps: _apps, onFigures: _onFigures, figuresIntervalMs: _interval, figuresEveryAnswerBelow: _below, ...shared } = options;
      this.providers.set(
        app.appId,
        new GitHubProvider({
          ...shared,
          github: { ...options.github, appId: app.appId },
          privateKey: app.privateKey,
          ...(app.invalidatePrivateKey ? { invalidatePrivateKey: app.invalidatePrivateKey } : {}),
          fetch: this.observingFetch(app.appId, base),
        }),
      );
    }
  }

  createRunner(job: JobMessage, instanceId: string, pool: string, options?: CreateRunnerOptions): Promise<RunnerRegistration> {
    // A rate-limit refusal means GitHub registered nothing: the next App may try.
    return this.spend(installationBudget(job.owner), (p) => p.createRunner(job, instanceId, pool, options));
  }

  deleteRunner(runnerId: string): Promise<void> {
    const repo = /^([\w.-]+)\/[\w.-]+\/\d+$/.exec(runnerId);
    const owner = repo?.[1] ?? this.options.github.organization;
    return this.spend(owner === undefined ? undefined : installationBudget(owner), (p) => p.deleteRunner(runnerId));
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

  /**
   * Runs `call` on the App with the most left of `key`; an App refused for its rate limit
   * during the call is left for the next. When every App is exhausted, the call goes to the
   * one whose reset comes first, which fails (or waits within its bound) as one App does.
   */
  private async spend<T>(key: AppBudgetKey | undefined, call: (p: GitHubProvider) => Promise<T>): Promise<T> {
    const tried = new Set<string>();
    let refusal: unknown;
    for (;;) {
      let appId = this.budgets.choose(
        this.appIds.filter((id) => !tried.has(id)),
        key,
      );
      if (appId === undefined) {
        if (refusal !== undefined) throw refusal;
        appId = this.budgets.soonest(this.appIds, key);
      }
      tried.add(appId);
      const startedAt = this.now();
      try {
        return await call(this.providers.get(appId)!);
      } catch (e) {
        const rateLimited = e instanceof GitHubApiError && (e.status === 403 || e.status === 429) && this.budgets.refusedSince(appId, startedAt);
        if (!rateLimited || tried.size >= this.appIds.length) throw e;
        refusal = e;
      }
    }
  }

  /** The App's fetch, telling `budgets` the rate-limit headers of every answer it gets. */
  private observingFetch(appId: string, base: typeof fetch): typeof fetch {
    return async (input, init) => {
      const res = await base(input, init);
      const auth = new Headers(init?.headers).get('authorization') ?? '';
      const url = new URL(input instanceof Request ? input.url : String(input));
      this.budgets.observe(appId, /^bearer /i.test(auth) ? 'app' : installationBudget(ownerOfPath(url.pathname) ?? '?'), res.status, (h) => res.headers.get(h) ?? undefined);
      this.reportFigures(res.status === 403 || res.status === 429);
      return res;
    };
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

/** The account a REST path acts on (`/orgs/{org}/...`, `/repos/{owner}/...`), when it names one. */
function ownerOfPath(path: string): string | undefined {
  return /\/(?:orgs|repos)\/([^/]+)/.exec(path)?.[1];
}
