import type { GitHubAnswer, GitHubAnswerObserver } from '../ci/github';
import { githubJobSources, isScaleSetPool, Provider, reconciledDeliveryId as contractDeliveryId, type GitHubConnectionConfig, type JobMessage, type PoolConfig } from '../shared/contract';
import type { Logger } from '../shared/log';
import { matchJobPool, pausedPool } from '../shared/match-pool';
import { isoTime } from '../webhook/delivery';
import { servesRepository } from '../webhook/github-delivery';
import { buildJobMessage } from '../webhook/job-message';
import { RateReserveReached, type RateBudget } from './rate-budget';
import { DeadlineReached, isStop, runSteps } from './run-steps';
import { chooseRedeliveries, parseDeliveries, type ListedDelivery } from './redeliveries';

/** The GitHub calls the reconciler makes (GitHubProvider's `appRequest` and `installationRequest`). */
export interface GitHubReconcileApi {
  appRequest(operation: string, route: string, params: Record<string, unknown>, retryServerErrors: boolean, observe?: GitHubAnswerObserver): Promise<GitHubAnswer>;
  installationRequest(operation: string, route: string, params: Record<string, unknown>, repository?: string, observe?: GitHubAnswerObserver): Promise<GitHubAnswer>;
}

export interface GitHubReconcileOptions {
  /** Failed deliveries redelivered per run at most. */
  readonly redeliverLimit: number;
  /** Attempts of one delivery (the first included) after which it is left to the fallback. */
  readonly maxDeliveryAttempts: number;
  /** Pages of 100 deliveries read per run at most. */
  readonly deliveryPages: number;
  /** Deliveries older than this are not redelivered (GitHub cancels a job queued for 24 hours). */
  readonly deliveryMaxAgeSeconds: number;
  /** Job lists (`GET .../runs/{id}/jobs`) read per run at most. */
  readonly runReadLimit: number;
  /** A queued job younger than this is left to its webhook delivery, which is normally seconds away. */
  readonly minQueuedSeconds: number;
  /** Repositories whose runs are read per run at most; consecutive runs take consecutive windows. */
  readonly repositoriesPerRun: number;
  /** The schedule's interval: it numbers the runs, and the run number chooses the window. */
  readonly intervalSeconds: number;
}

export const GITHUB_RECONCILE_DEFAULTS: GitHubReconcileOptions = {
  redeliverLimit: 10,
  maxDeliveryAttempts: 3,
  deliveryPages: 3,
  deliveryMaxAgeSeconds: 24 * 60 * 60,
  runReadLimit: 100,
  minQueuedSeconds: 120,
  repositoriesPerRun: 50,
  intervalSeconds: 300,
};

/** Run states whose jobs may wait for a runner: a later job of a running workflow is queued in an in-progress run. */
export const RUN_STATUSES_WITH_QUEUED_JOBS = ['queued', 'in_progress'] as const;

export interface GitHubReconcileDeps {
  readonly api: GitHubReconcileApi;
  readonly github: GitHubConnectionConfig;
  readonly pools: readonly PoolConfig[];
  readonly budget: RateBudget;
  readonly options: GitHubReconcileOptions;
  readonly now: () => Date;
  readonly log: Logger;
  /** True once the run must stop to finish within its Lambda's time (no new request starts). */
  readonly outOfTime: () => boolean;
  /** Queues what one repository yielded, as soon as it is read: a run cut short keeps what it found. */
  readonly onFound: (messages: JobMessage[]) => Promise<void>;
}

/**
 * The budgets the reconciler keeps apart: the App's JWT, and each organisation's (account's)
 * installation, so one organisation near its limit holds back its own repositories only.
 */
type Credential = 'app' | `installation:${string}`;

const installationOf = (owner: string): Credential => `installation:${owner.toLowerCase()}`;

export interface GitHubReconcileResult {
  /** Redeliveries GitHub accepted. */
  readonly redelivered: number;
  /** Queued jobs matching a pool, handed to `onFound`. */
  readonly found: number;
  /** GitHub requests made (token minting aside). */
  readonly requests: number;
  /** Set when the run ended early: at a rate limit's reserve (the credential) or at its `deadline`. */
  readonly stoppedAt?: string;
  /** Calls that failed (the run went on with the next repository). */
  readonly errors: number;
}

/** The delivery id (and so the trace id) of a job the reconciler found: it says where it came from. */
export function reconciledDeliveryId(providerJobId: string): string {
  return contractDeliveryId(Provider.GITHUB, providerJobId);
}

/**
 * One reconciler run for GitHub: (a) redeliver failed queued `workflow_job` deliveries, (b) list
 * the queued jobs of the installation's repositories and return those matching a pool. Every
 * call is counted and checked against the rate limit's reserve first; at the reserve the run
 * ends with what it has (the next run starts over).
 */
export async function reconcileGitHub(deps: GitHubReconcileDeps): Promise<GitHubReconcileResult> {
  const state = { requests: 0, errors: 0 };
  const spend = async (credential: Credential, call: (observe: GitHubAnswerObserver) => Promise<GitHubAnswer>): Promise<GitHubAnswer> => {
    if (deps.outOfTime()) throw new DeadlineReached();
    if (!deps.budget.allows(credential)) throw new RateReserveReached(credential);
    state.requests++;
    return call((_c, headers) => deps.budget.observe(credential, (h) => headers[h]));
  };
  let redelivered = 0;
  const found = { count: 0 };
  const stoppedAt = await runSteps(
    [
      ['redeliver failed deliveries', async () => void (redelivered = await redeliverFailed(deps, spend, state))],
      ['find queued jobs', async () => findQueuedJobs(deps, spend, state, found)],
    ],
    deps.log,
    state,
  );
  return { redelivered, found: found.count, requests: state.requests, errors: state.errors, ...(stoppedAt ? { stoppedAt } : {}) };
}

type Spend = (credential: Credential, call: (observe: GitHubAnswerObserver) => Promise<GitHubAnswer>) => Promise<GitHubAnswer>;

async function redeliverFailed(deps: GitHubReconcileDeps, spend: Spend, state: { errors: number }): Promise<number> {
  const { options, now } = deps;
  const notBefore = now().getTime() - options.deliveryMaxAgeSeconds * 1000;
  const listed: ListedDelivery[] = [];
  let cursor: string | undefined;
  for (let page = 0; page < options.deliveryPages; page++) {
    let answer: GitHubAnswer;
    try {
      answer = await spend('app', (observe) => deps.api.appRequest('list deliveries', 'GET /app/hook/deliveries', { per_page: 100, ...(cursor ? { cursor } : {}) }, true, observe));
    } catch (error) {
      if (isStop(error)) throw error;
      deps.log.error('listing the App webhook deliveries failed', { error: (error as Error).message });
      state.errors++;
      break;
    }
    const deliveries = parseDeliveries(answer.data);
    listed.push(...deliveries);
    cursor = nextCursor(answer.headers.link);
    // Newest first: once a page reaches past the age bound, older pages hold nothing to redeliver.
    if (!cursor || deliveries.some((d) => d.deliveredAt < notBefore)) break;
  }
  const choice = chooseRedeliveries(listed, { limit: options.redeliverLimit, maxAttempts: options.maxDeliveryAttempts, notBefore });
  if (choice.givenUp.length > 0) deps.log.warn('deliveries failed every attempt; left to the queued-jobs scan', { guids: choice.givenUp.slice(0, 20), count: choice.givenUp.length });
  let accepted = 0;
  for (const id of choice.redeliver) {
    try {
      // Not retried on 5xx: a second redelivery would be harmless (the webhook's deduplication
      // and the per-job record), but it would spend a request on what the next run sees anyway.
      await spend('app', (observe) => deps.api.appRequest('redeliver', 'POST /app/hook/deliveries/{delivery_id}/attempts', { delivery_id: id }, false, observe));
      accepted++;
    } catch (error) {
      if (isStop(error)) throw error;
      deps.log.error('redelivery refused', { deliveryId: id, error: (error as Error).message });
      state.errors++;
    }
  }
  if (choice.redeliver.length > 0 || choice.deferred > 0) deps.log.info('failed deliveries redelivered', { redelivered: accepted, deferred: choice.deferred });
  return accepted;
}

/**
 * The organisations whose installation reached the reserve in this run: their repositories are
 * skipped, the others' read on. Once every organisation the run reads is held back, the run
 * stops as at one installation's reserve (credential "installation").
 */
class HeldBack {
  private readonly accounts = new Set<string>();
  constructor(private readonly log: Logger) {}

  /** Takes a reserve stop of an installation (rethrowing any other stop or error). */
  take(error: unknown): void {
    if (!(error instanceof RateReserveReached) || !error.credential.startsWith('installation:')) throw error;
    const account = error.credential.slice('installation:'.length);
    if (this.accounts.has(account)) return;
    this.accounts.add(account);
    this.log.warn("an organisation's installation reached the reconciler's rate limit reserve; its repositories wait for the next run", { account });
  }

  has(owner: string): boolean {
    return this.accounts.has(owner.toLowerCase());
  }

  /** Stops the run when nothing is left to read: every one of `owners` is held back. */
  stopIfAll(owners: readonly string[]): void {
    if (owners.length > 0 && owners.every((o) => this.has(o))) throw new RateReserveReached('installation');
  }
}

async function findQueuedJobs(deps: GitHubReconcileDeps, spend: Spend, state: { errors: number }, found: { count: number }): Promise<void> {
  const held = new HeldBack(deps.log);
  const all = await repositoriesOf(deps, spend, held);
  const runNumber = Math.floor(deps.now().getTime() / (deps.options.intervalSeconds * 1000));
  // A window wider than the run's job-list reads would leave its last repositories unread at
  // every turn (each gets at least 1 read): the window is as wide as the reads, so it rotates over all.
  const window = repositoryWindow(all, runNumber, Math.min(deps.options.repositoriesPerRun, Math.max(1, deps.options.runReadLimit)));
  const reads = { runs: 0 };
  const seen = new Set<string>();
  const owners = [...new Set(window.map((full) => full.split('/')[0]!.toLowerCase()))];
  held.stopIfAll(owners);
  await inFairShares(window, deps.options.runReadLimit, reads, async (full, share) => {
    if (held.has(full.split('/')[0]!)) return;
    const messages: JobMessage[] = [];
    try {
      await readRepository(deps, spend, full, share, reads, messages);
    } catch (error) {
      if (error instanceof RateReserveReached) {
        held.take(error);
        held.stopIfAll(owners);
        return;
      }
      if (isStop(error)) throw error;
      deps.log.error('listing queued jobs failed for a repository; going on with the next', { repository: full, error: (error as Error).message });
      state.errors++;
    } finally {
      // Queued per repository, even when the run stops inside it: the run's time is bounded, what it found is kept.
      const fresh = messages.filter((m) => !seen.has(m.jobId) && seen.add(m.jobId));
      found.count += fresh.length;
      if (fresh.length > 0) await deps.onFound(fresh);
    }
  });
}

/**
 * Visits the window's repositories in order, each with its share of the job-list reads left
 * (`runReadShare`); `visit` counts the reads it spends in `reads.runs`, also when it throws.
 * Stops once the reads are spent: a repository's run lists would then yield nothing.
 */
export async function inFairShares<T>(window: readonly T[], runReadLimit: number, reads: { runs: number }, visit: (item: T, share: number) => Promise<void>): Promise<void> {
  for (const [i, item] of window.entries()) {
    const share = runReadShare(runReadLimit - reads.runs, window.length - i);
    if (share === 0) return;
    await visit(item, share);
  }
}

/**
 * The job-list reads one repository may spend: an equal part of what is left for the
 * repositories left in the window (at least 1 while any is left), so a busy repository early in
 * the window cannot spend the whole run's reads, and what a quiet one leaves is carried forward.
 */
export function runReadShare(readsLeft: number, repositoriesLeft: number): number {
  if (readsLeft <= 0 || repositoriesLeft <= 0) return 0;
  return Math.max(1, Math.floor(readsLeft / repositoriesLeft));
}

/** One repository's queued jobs matching a pool, into `out`, reading at most `share` of its runs' job lists. */
async function readRepository(deps: GitHubReconcileDeps, spend: Spend, full: string, share: number, reads: { runs: number }, out: JobMessage[]): Promise<void> {
  const [owner, repo] = full.split('/') as [string, string];
  // A run can move from queued to in_progress between the two lists: read its jobs once.
  // Queued runs come first: a run's first job waits in a queued run.
  const runIds = new Set<number>();
  for (const status of RUN_STATUSES_WITH_QUEUED_JOBS) {
    const runs = await spend(installationOf(owner), (observe) => deps.api.installationRequest('list runs', 'GET /repos/{owner}/{repo}/actions/runs', { owner, repo, status, per_page: 100 }, full, observe));
    for (const id of idsOf((runs.data as { workflow_runs?: unknown })?.workflow_runs)) runIds.add(id);
  }
  for (const runId of [...runIds].slice(0, share)) {
    reads.runs++;
    const jobs = await spend(installationOf(owner), (observe) =>
      deps.api.installationRequest('list run jobs', 'GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs', { owner, repo, run_id: runId, filter: 'latest', per_page: 100 }, full, observe),
    );
    out.push(...queuedMessages(deps, owner, repo, (jobs.data as { jobs?: unknown })?.jobs));
  }
}

/**
 * The repositories whose queued jobs the run reads: every repository of each organisation the
 * fleet's pools serve (through that organisation's installation, each organisation once,
 * however many pools share it) and the repositories pools list outside them.
 */
async function repositoriesOf(deps: GitHubReconcileDeps, spend: Spend, held: HeldBack): Promise<string[]> {
  // Scale-set pools' jobs come from GitHub's assignment (docs/scale-set.md): their scopes are not scanned.
  const sources = githubJobSources(deps.github, webhookPools(deps.pools));
  const out: string[] = [...sources.repositories];
  for (const org of sources.organizations) {
    try {
      out.push(...(await installationRepositories(deps, spend, org)));
    } catch (error) {
      held.take(error);
    }
  }
  held.stopIfAll([...sources.organizations, ...sources.repositories.map((r) => r.split('/')[0]!)]);
  return out;
}

/** The repositories of one organisation's installation that a pool serves (archived ones have no jobs). */
async function installationRepositories(deps: GitHubReconcileDeps, spend: Spend, org: string): Promise<string[]> {
  const out: string[] = [];
  for (let page = 1; ; page++) {
    const answer = await spend(installationOf(org), (observe) => deps.api.installationRequest('list repositories', 'GET /installation/repositories', { per_page: 100, page }, org, observe));
    const repos = (answer.data as { repositories?: unknown })?.repositories;
    if (!Array.isArray(repos)) throw new Error('the repositories answer lacks "repositories"');
    for (const r of repos as Record<string, unknown>[]) {
      if (typeof r?.full_name === 'string' && r.archived !== true && servesRepository(deps.github, webhookPools(deps.pools), ...(r.full_name.split('/') as [string, string]))) out.push(r.full_name);
    }
    if (repos.length < 100) return out;
  }
}

/** Queued jobs of one run's job list that match a pool, as the webhook would queue them. */
export function queuedMessages(deps: Pick<GitHubReconcileDeps, 'github' | 'pools' | 'options' | 'now' | 'log'>, owner: string, repo: string, jobs: unknown): JobMessage[] {
  if (!Array.isArray(jobs)) return [];
  const now = deps.now();
  const out: JobMessage[] = [];
  for (const j of jobs as Record<string, unknown>[]) {
    if (j?.status !== 'queued' || !Number.isSafeInteger(j.id) || !Array.isArray(j.labels)) continue;
    // Read as the webhook reads the delivery's created_at (one parser), and carried in the message.
    const createdAt = isoTime(j.created_at);
    if (createdAt !== undefined && now.getTime() - Date.parse(createdAt) < deps.options.minQueuedSeconds * 1000) continue;
    const labels = (j.labels as unknown[]).filter((l): l is string => typeof l === 'string' && l !== '');
    const match = matchJobPool({ github: deps.github, pools: deps.pools }, Provider.GITHUB, owner, repo, labels);
    if (!match.pool || pausedPool(match)) continue;
    const providerJobId = String(j.id);
    out.push(
      buildJobMessage(
        { provider: Provider.GITHUB, providerJobId, owner, project: repo, labels, ...(createdAt ? { createdAt } : {}) },
        { labels, labelsResolved: true, pool: match.pool.name, deliveryId: reconciledDeliveryId(providerJobId), receivedAt: now },
      ),
    );
  }
  return out;
}

function idsOf(runs: unknown): number[] {
  return Array.isArray(runs) ? (runs as Record<string, unknown>[]).map((r) => r?.id).filter((id): id is number => Number.isSafeInteger(id)) : [];
}

/** The `cursor` of a `link` header's rel="next", as GitHub pages its delivery list. */
export function nextCursor(link: string | undefined): string | undefined {
  const next = link?.split(',').find((part) => /rel="next"/.test(part));
  const url = next && /<([^>]+)>/.exec(next)?.[1];
  return url ? (new URL(url).searchParams.get('cursor') ?? undefined) : undefined;
}

/**
 * The repositories run number `runNumber` reads: `cap` of them, starting at `runNumber * cap`
 * (mod N), so runs k, k+1, ..., k + ceil(N/cap) - 1 read consecutive windows that together
 * cover every repository (while the list stays the same). Starting by the minute instead
 * (`minute % N`) visits only the few starts a 5-minute schedule lands on.
 */
export function repositoryWindow<T>(items: readonly T[], runNumber: number, cap: number): T[] {
  const n = items.length;
  if (n === 0) return [];
  const start = (((runNumber % n) * (cap % n)) % n + n) % n;
  return Array.from({ length: Math.min(cap, n) }, (_, i) => items[(start + i) % n]!);
}

/** The pools whose jobs come from webhooks (and so from this scan when a delivery is lost): not the scale-set pools. */
export function webhookPools(pools: readonly PoolConfig[]): PoolConfig[] {
  return pools.filter((p) => !isScaleSetPool(p));
}
