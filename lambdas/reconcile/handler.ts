import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { randomUUID } from 'node:crypto';
import { errorName, mapLimit, WRITE_IDEMPOTENT, type AwsCaller } from '../shared/aws-call';
import { Provider, type CiProvider, type FleetConfig, type JobMessage } from '../shared/contract';
import { createLogger, Metrics, type Logger, type Sink } from '../shared/log';
import { deduplicationId } from '../webhook/job-message';
import { GITHUB_RECONCILE_DEFAULTS, reconcileGitHub, webhookPools, type GitHubReconcileApi, type GitHubReconcileOptions } from './github';
import { GITLAB_RECONCILE_DEFAULTS, reconcileGitLab, type GitLabReconcileApi, type GitLabReconcileOptions } from './gitlab';
import { RateBudget } from './rate-budget';

export interface ReconcileOptions {
  readonly github: GitHubReconcileOptions;
  readonly gitlab: GitLabReconcileOptions;
  /** Share of each rate limit the reconciler leaves to scale-up and the sweep. */
  readonly reserveFraction: number;
  /** The reserve in requests at least, whatever the limit. */
  readonly minReserve: number;
  /**
   * Time left to the Lambda's timeout at which no new request starts: one GitHub call may
   * take 3 attempts of 10 s each, and the jobs found in the repository it belongs to are
   * queued after it.
   */
  readonly deadlineMarginMs: number;
}

/** Logged for each job the reconciler queued (the local run's timeline reads it). */
export const RECONCILED_MESSAGE = 'queued job found by the reconciler';

export const RECONCILE_DEFAULTS: ReconcileOptions = { github: GITHUB_RECONCILE_DEFAULTS, gitlab: GITLAB_RECONCILE_DEFAULTS, reserveFraction: 0.2, minReserve: 100, deadlineMarginMs: 40_000 };

/** What the reconciler reads of its Lambda context: the time left before the timeout. */
export interface ReconcileContext {
  getRemainingTimeInMillis(): number;
}

export interface ReconcileDeps {
  readonly sqs: SQSClient;
  readonly aws: AwsCaller;
  readonly loadConfig: () => Promise<FleetConfig>;
  readonly providers: (config: FleetConfig) => Partial<Record<Provider, CiProvider>>;
  readonly queueUrl: string;
  readonly now?: () => Date;
  readonly sink?: Sink;
  readonly options?: Partial<Omit<ReconcileOptions, 'github' | 'gitlab'>> & { readonly github?: Partial<GitHubReconcileOptions>; readonly gitlab?: Partial<GitLabReconcileOptions> };
}

export interface ReconcileReport {
  readonly redelivered: number;
  readonly queued: number;
  readonly requests: number;
  readonly stoppedAt?: string;
}

/**
 * The reconciler (scheduled): asks the CI service for what the webhook should have seen and
 * did not. GitHub: failed deliveries are redelivered, and queued jobs whose delivery never
 * came are queued here, with the webhook's message builder and a trace id naming the
 * reconciler. GitLab: failed Job Hook events are resent, and pending jobs are queued the same
 * way. The per-job record in scale-up makes a job found twice launch once.
 */
export function createReconcileHandler(deps: ReconcileDeps): (event?: unknown, context?: ReconcileContext) => Promise<ReconcileReport> {
  const options = mergeOptions(deps.options);
  const now = deps.now ?? (() => new Date());
  return async (_event, context) => {
    const log = createLogger({ fn: 'reconcile', invocation: randomUUID() }, deps.sink);
    const config = await deps.loadConfig();
    const metrics = new Metrics(config.metrics.namespace, deps.sink);
    // One budget per provider: their rate limits are unrelated.
    const budgets = { github: new RateBudget(options.reserveFraction, options.minReserve), gitlab: new RateBudget(options.reserveFraction, options.minReserve) };
    try {
      const queued: JobMessage[] = [];
      const run: RunInputs = { config, options, now, log, budgets, context, onFound: async (found) => void queued.push(...(await queueAll(deps, found, log))) };
      const runs = await runProviders(run, deps.providers(config));
      publish(metrics, config.metrics.names, runs, queued, budgets);
      for (const r of runs) log.info('reconciled', { provider: r.provider, redelivered: r.sent, found: r.found, requests: r.requests, errors: r.errors, stoppedAt: r.stoppedAt ?? null, queued: queued.filter((m) => m.provider === r.provider).length });
      return report(runs, queued);
    } finally {
      metrics.flush();
    }
  };
}

function mergeOptions(overrides: ReconcileDeps['options']): ReconcileOptions {
  return {
    ...RECONCILE_DEFAULTS,
    ...overrides,
    github: { ...RECONCILE_DEFAULTS.github, ...overrides?.github },
    gitlab: { ...RECONCILE_DEFAULTS.gitlab, ...overrides?.gitlab },
  };
}

/** What one invocation's provider runs share: each spends its own budget and checks the deadline itself. */
interface RunInputs {
  readonly config: FleetConfig;
  readonly options: ReconcileOptions;
  readonly now: () => Date;
  readonly log: Logger;
  readonly budgets: Record<'github' | 'gitlab', RateBudget>;
  readonly context: ReconcileContext | undefined;
  readonly onFound: (found: JobMessage[]) => Promise<void>;
}

/**
 * Runs each configured provider at the same time, each to the whole run's deadline: run one
 * after the other, a slow GitHub (2 s a request) spent the run's time and GitLab made no
 * request at all, every run. Their rate budgets are separate, so running together spends
 * nothing of the other's. A provider run that throws (runSteps catches each step's errors, so
 * only a bug) does not stop the other: the jobs both queued stay queued, and the error is
 * rethrown once both are done (that run's metrics and 'reconciled' lines are then not written).
 */
async function runProviders(run: RunInputs, providers: Partial<Record<Provider, CiProvider>>): Promise<ProviderRun[]> {
  const { config, options, budgets, log } = run;
  const common = {
    pools: config.pools,
    now: run.now,
    outOfTime: () => run.context !== undefined && run.context.getRemainingTimeInMillis() < options.deadlineMarginMs,
    onFound: run.onFound,
  };
  const started: Promise<ProviderRun>[] = [];
  const github = providers.github;
  // Scale-set pools' jobs come from GitHub's assignment (docs/scale-set.md): no scan for a
  // fleet whose GitHub pools are all scale sets.
  if (config.github && isGitHubApi(github) && webhookPools(config.pools).some((p) => p.provider === Provider.GITHUB)) {
    const deps = { ...common, budget: budgets.github, api: github, github: config.github, options: options.github, log: log.child({ provider: Provider.GITHUB }) };
    started.push(reconcileGitHub(deps).then((r) => ({ provider: Provider.GITHUB, sent: r.redelivered, ...r })));
  }
  const gitlab = providers.gitlab;
  if (config.gitlab && isGitLabApi(gitlab)) {
    const deps = { ...common, budget: budgets.gitlab, api: gitlab, gitlab: config.gitlab, options: options.gitlab, log: log.child({ provider: Provider.GITLAB }) };
    started.push(reconcileGitLab(deps).then((r) => ({ provider: Provider.GITLAB, sent: r.resent, ...r })));
  }
  const settled = await Promise.allSettled(started);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) throw failed.reason;
  return settled.map((s) => (s as PromiseFulfilledResult<ProviderRun>).value);
}

function publish(metrics: Metrics, names: FleetConfig['metrics']['names'], runs: readonly ProviderRun[], queued: readonly JobMessage[], budgets: RunInputs['budgets']): void {
  for (const r of runs) if (r.sent > 0) metrics.add(names.redeliveries, {}, r.sent);
  // Every run, 0 included: the alarm fires on failed steps in runs in a row.
  metrics.add(names.reconcileErrors, {}, runs.reduce((sum, r) => sum + r.errors, 0));
  for (const m of queued) metrics.add(names.jobsReconciled, { Pool: m.pool ?? 'unresolved' });
  for (const [provider, budget] of Object.entries(budgets)) {
    // One figure per credential kind, as before budgets per organisation: "installation" is the
    // least any organisation's installation has left (the one nearest the reserve).
    const least = new Map<string, number>();
    for (const [credential, remaining] of budget.remaining()) {
      const kind = credential.split(':')[0]!;
      least.set(kind, Math.min(least.get(kind) ?? Infinity, remaining));
    }
    for (const [kind, remaining] of least) metrics.add(names.ciRateLimitRemaining, { Credential: `${provider}-${kind}` }, remaining, 'None');
  }
}

function report(runs: readonly ProviderRun[], queued: readonly JobMessage[]): ReconcileReport {
  const stoppedAt = runs.find((r) => r.stoppedAt)?.stoppedAt;
  return {
    redelivered: runs.reduce((n, r) => n + r.sent, 0),
    queued: queued.length,
    requests: runs.reduce((n, r) => n + r.requests, 0),
    ...(stoppedAt ? { stoppedAt } : {}),
  };
}

/** Sends each found job as the webhook would (FIFO group: the job; deduplication: its delivery id). */
async function queueAll(deps: ReconcileDeps, messages: readonly JobMessage[], log: Logger): Promise<JobMessage[]> {
  const sent = await mapLimit(messages, 5, async (m) => {
    const l = log.child({ traceId: m.traceId, jobId: m.jobId, pool: m.pool ?? null });
    try {
      await deps.aws.send(
        deps.sqs,
        new SendMessageCommand({ QueueUrl: deps.queueUrl, MessageBody: JSON.stringify(m), MessageGroupId: m.jobId, MessageDeduplicationId: deduplicationId(m.provider, m.deliveryId) }),
        WRITE_IDEMPOTENT,
      );
      // Its intake (`received`, `queued`) is stamped by scale-up, once per job (scale-up/intake.ts).
      l.info(RECONCILED_MESSAGE, { labels: [...m.labels] });
      return m;
    } catch (error) {
      // The next run finds the job again while it is still queued.
      l.error('queueing a reconciled job failed', { error: errorName(error) });
      return undefined;
    }
  });
  return sent.filter((m): m is JobMessage => m !== undefined);
}

interface ProviderRun {
  readonly provider: Provider;
  /** Redeliveries (GitHub) or resends (GitLab) the service accepted. */
  readonly sent: number;
  readonly found: number;
  readonly requests: number;
  readonly errors: number;
  readonly stoppedAt?: string;
}

function isGitHubApi(p: unknown): p is GitHubReconcileApi {
  return typeof (p as GitHubReconcileApi | undefined)?.appRequest === 'function' && typeof (p as GitHubReconcileApi).installationRequest === 'function';
}

function isGitLabApi(p: unknown): p is GitLabReconcileApi {
  return typeof (p as GitLabReconcileApi | undefined)?.request === 'function';
}
