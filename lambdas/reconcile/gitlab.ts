import type { GitLabAnswer, GitLabRequestOptions } from '../ci/gitlab';
import { fleetGitLabScopes, fleetGitLabWebhooks, GitLabRunnerType, GitLabWebhookOwner, Provider, reconciledDeliveryId, type GitLabConnectionConfig, type GitLabWebhookConfig, type JobMessage, type PoolConfig } from '../shared/contract';
import { candidatePools } from '../shared/candidate-pools';
import type { Logger } from '../shared/log';
import { matchPool, pausedPool } from '../shared/match-pool';
import { servesProject } from '../webhook/gitlab-delivery';
import { isoTime } from '../webhook/delivery';
import { buildJobMessage } from '../webhook/job-message';
import { repositoryWindow } from './github';
import { chooseResends, parseHookEvents, type ListedHookEvent } from './hook-events';
import { RateReserveReached, type RateBudget } from './rate-budget';
import { DeadlineReached, isStop, runSteps } from './run-steps';

/** The GitLab calls the reconciler makes (GitLabProvider's `request`). */
export interface GitLabReconcileApi {
  request(operation: string, method: string, path: string, opts: GitLabRequestOptions): Promise<GitLabAnswer>;
}

export interface GitLabReconcileOptions {
  /**
   * Failed hook events resent per run and hook at most. GitLab allows 5 resends a minute per hook
   * and user (doc/api/project_webhooks.md, "Resend a project webhook event"): more would be refused.
   */
  readonly resendLimit: number;
  /** Attempts of one delivery (the first included) after which it is left to the pending-jobs scan. */
  readonly maxDeliveryAttempts: number;
  /** Pages of `GITLAB_HOOK_EVENTS_PER_PAGE` hook events read per run and hook at most (newest first). */
  readonly hookEventPages: number;
  /** Projects whose pending jobs are listed per run at most; consecutive runs take consecutive windows. */
  readonly projectsPerRun: number;
  /** Pages of 100 pending jobs read per project at most. */
  readonly jobPagesPerProject: number;
  /** A job pending for less than this is left to its Job Hook, normally seconds away. */
  readonly minQueuedSeconds: number;
  /** The schedule's interval: it numbers the runs, and the run number chooses the window. */
  readonly intervalSeconds: number;
}

/** GitLab's own cap on hook event resends: 5 a minute per hook and user; a run is at least a minute apart. */
export const GITLAB_RESENDS_PER_MINUTE = 5;

/**
 * The hook event list's page size: GitLab allows `per_page` 1..20 there (lib/api/hooks/events.rb,
 * `values: 1..20`, for project and group hooks) and answers a larger one 400, where its other
 * lists allow 100.
 */
export const GITLAB_HOOK_EVENTS_PER_PAGE = 20;

export const GITLAB_RECONCILE_DEFAULTS: GitLabReconcileOptions = {
  resendLimit: GITLAB_RESENDS_PER_MINUTE,
  maxDeliveryAttempts: 3,
  // The 300 newest events, as GitHub's 3 pages of 100 deliveries.
  hookEventPages: 15,
  projectsPerRun: 50,
  jobPagesPerProject: 2,
  minQueuedSeconds: 120,
  intervalSeconds: 300,
};

/** The credential the GitLab calls spend: the access token (one rate limit per user). */
export const GITLAB_CREDENTIAL = 'token';

export interface GitLabReconcileDeps {
  readonly api: GitLabReconcileApi;
  readonly gitlab: GitLabConnectionConfig;
  readonly pools: readonly PoolConfig[];
  readonly budget: RateBudget;
  readonly options: GitLabReconcileOptions;
  readonly now: () => Date;
  readonly log: Logger;
  readonly outOfTime: () => boolean;
  /** Queues what one project yielded, as soon as it is read. */
  readonly onFound: (messages: JobMessage[]) => Promise<void>;
}

export interface GitLabReconcileResult {
  readonly resent: number;
  readonly found: number;
  /** Pending jobs left queued because their pool is paused (`maxRunners` 0). */
  readonly paused: number;
  readonly requests: number;
  readonly stoppedAt?: string;
  readonly errors: number;
}

/** The delivery id (and so the trace id) of a GitLab job the reconciler found. */
export function reconciledGitLabDeliveryId(providerJobId: string): string {
  return reconciledDeliveryId(Provider.GITLAB, providerJobId);
}

type Spend = (operation: string, method: string, path: string, opts?: Omit<GitLabRequestOptions, 'observe'>) => Promise<GitLabAnswer>;

/**
 * One reconciler run for GitLab: (a) resend failed pending-job Job Hook events of each of the
 * fleet's webhooks (the connection's and the pools' own, contract gitlab-scope.ts), (b) list the
 * pending jobs of the projects every pool scope serves, each project once, and return those
 * matching a pool. Every call is counted and checked against the token's rate-limit reserve first.
 */
export async function reconcileGitLab(deps: GitLabReconcileDeps): Promise<GitLabReconcileResult> {
  const state = { requests: 0, errors: 0 };
  const spend: Spend = async (operation, method, path, opts) => {
    if (deps.outOfTime()) throw new DeadlineReached();
    if (!deps.budget.allows(GITLAB_CREDENTIAL)) throw new RateReserveReached(GITLAB_CREDENTIAL);
    state.requests++;
    return deps.api.request(operation, method, path, { expect: [200], ...opts, observe: (h) => deps.budget.observe(GITLAB_CREDENTIAL, h) });
  };
  let resent = 0;
  const found = { count: 0, paused: 0 };
  const steps: [string, () => Promise<void>][] = [];
  for (const hook of fleetGitLabWebhooks(deps.gitlab, deps.pools)) {
    steps.push([`resend failed hook events of ${hookPath(hook)}`, async () => void (resent += await resendFailed(deps, spend, state, hook))]);
  }
  steps.push(['find pending jobs', async () => findPendingJobs(deps, spend, state, found)]);
  const stoppedAt = await runSteps(steps, deps.log, state);
  return { resent, found: found.count, paused: found.paused, requests: state.requests, errors: state.errors, ...(stoppedAt ? { stoppedAt } : {}) };
}

/** `/projects/:id/hooks/:hook_id` or `/groups/:id/hooks/:hook_id`. */
function hookPath(w: GitLabWebhookConfig): string {
  return `/${w.owner === GitLabWebhookOwner.GROUP ? 'groups' : 'projects'}/${w.ownerId}/hooks/${w.hookId}`;
}

async function resendFailed(deps: GitLabReconcileDeps, spend: Spend, state: { errors: number }, webhook: GitLabWebhookConfig): Promise<number> {
  const hook = hookPath(webhook);
  await reportHookState(deps, spend, hook);
  const listed: ListedHookEvent[] = [];
  for (let page = 1; page <= deps.options.hookEventPages; page++) {
    const answer = await spend('list hook events', 'GET', `${hook}/events?per_page=${GITLAB_HOOK_EVENTS_PER_PAGE}&page=${page}`);
    listed.push(...parseHookEvents(answer.data));
    if (!answer.header('x-next-page')) break;
  }
  const limit = Math.min(deps.options.resendLimit, GITLAB_RESENDS_PER_MINUTE);
  const choice = chooseResends(listed, { limit, maxAttempts: deps.options.maxDeliveryAttempts });
  if (choice.givenUp.length > 0) deps.log.warn('hook events failed every attempt; left to the pending-jobs scan', { keys: choice.givenUp.slice(0, 20), count: choice.givenUp.length });
  let accepted = 0;
  for (const id of choice.resend) {
    try {
      // Not retried on 5xx: a second resend is harmless (the webhook's deduplication by
      // Idempotency-Key and the per-job record) but spends one of the hook's 5 a minute.
      await spend('resend hook event', 'POST', `${hook}/events/${id}/resend`, { expect: [200, 201], retryServerErrors: false });
      accepted++;
    } catch (error) {
      if (isStop(error)) throw error;
      deps.log.error('hook event resend refused', { hookEventId: id, error: (error as Error).message });
      state.errors++;
    }
  }
  if (choice.resend.length > 0 || choice.deferred > 0) deps.log.info('failed hook events resent', { resent: accepted, deferred: choice.deferred });
  return accepted;
}

/**
 * Logs a paused or disabled hook: GitLab pauses a hook after 4 failures in a row and disables
 * it after 40 (`alert_status`: executable, temporarily_disabled, disabled; `disabled_until`).
 * A resend to a disabled hook is not delivered, so the scan is what serves its jobs meanwhile.
 */
async function reportHookState(deps: GitLabReconcileDeps, spend: Spend, hook: string): Promise<void> {
  const answer = await spend('get hook', 'GET', hook);
  const data = answer.data as { alert_status?: unknown; disabled_until?: unknown } | undefined;
  if (typeof data?.alert_status === 'string' && data.alert_status !== 'executable') {
    deps.log.warn('the GitLab webhook is not executable: GitLab sends it no events until it is re-enabled or its pause ends (docs/gitlab.md)', {
      hook,
      alertStatus: data.alert_status,
      disabledUntil: typeof data.disabled_until === 'string' ? data.disabled_until : null,
    });
  }
}

async function findPendingJobs(deps: GitLabReconcileDeps, spend: Spend, state: { errors: number }, found: { count: number; paused: number }): Promise<void> {
  const all = await projectsOf(deps, spend, state);
  const runNumber = Math.floor(deps.now().getTime() / (deps.options.intervalSeconds * 1000));
  for (const projectId of repositoryWindow(all, runNumber, deps.options.projectsPerRun)) {
    const messages: JobMessage[] = [];
    try {
      for (let page = 1; page <= deps.options.jobPagesPerProject; page++) {
        const answer = await spend('list pending jobs', 'GET', `/projects/${projectId}/jobs?scope[]=pending&per_page=100&page=${page}`);
        messages.push(...pendingMessages(deps, projectId, answer.data, found));
        if (!answer.header('x-next-page')) break;
      }
    } catch (error) {
      if (isStop(error)) throw error;
      deps.log.error('listing pending jobs failed for a project; going on with the next', { projectId, error: (error as Error).message });
      state.errors++;
    } finally {
      // Queued per project, even when the run stops inside it: what it found is kept.
      found.count += messages.length;
      if (messages.length > 0) await deps.onFound(messages);
    }
  }
  if (found.paused > 0) deps.log.info('pending jobs of paused pools left queued at GitLab until the pool resumes', { reason: 'paused', count: found.paused });
}

/**
 * The projects to scan, each once: the configured ones, else those of every pool scope: a project
 * runner's project, a group runner's group with its subgroups (`GET /groups/:id/projects`, shared
 * projects excluded: the group's runners do not serve them), none for instance runners.
 */
async function projectsOf(deps: GitLabReconcileDeps, spend: Spend, state: { errors: number }): Promise<number[]> {
  const { gitlab } = deps;
  if (gitlab.reconcileProjectIds) return gitlab.reconcileProjectIds.filter((id) => servesProject(gitlab, id, deps.pools));
  const out = new Set<number>();
  for (const scope of fleetGitLabScopes(gitlab, deps.pools.length > 0 ? deps.pools : [{ provider: Provider.GITLAB }])) {
    if (scope.scopeId === undefined) continue;
    if (scope.runnerType === GitLabRunnerType.PROJECT) out.add(scope.scopeId);
    else if (scope.runnerType === GitLabRunnerType.GROUP) {
      try {
        for (const id of await groupProjects(spend, scope.scopeId)) out.add(id);
      } catch (error) {
        // One group the token cannot read (403/404) must not hide the other scopes' jobs.
        if (isStop(error)) throw error;
        deps.log.error("listing a group's projects failed; scanning the other scopes", { groupId: scope.scopeId, error: (error as Error).message });
        state.errors++;
      }
    }
  }
  return [...out];
}

async function groupProjects(spend: Spend, groupId: number): Promise<number[]> {
  const out: number[] = [];
  for (let page = 1; ; page++) {
    const answer = await spend('list group projects', 'GET', `/groups/${groupId}/projects?include_subgroups=true&with_shared=false&archived=false&simple=true&per_page=100&page=${page}`);
    if (!Array.isArray(answer.data)) throw new Error('the group projects answer is not a list');
    for (const p of answer.data as Record<string, unknown>[]) if (Number.isSafeInteger(p?.id)) out.push(p.id as number);
    if (!answer.header('x-next-page')) return out;
  }
}

/**
 * Pending jobs of one page that match a pool, as the webhook would queue them; a paused pool's
 * are left at GitLab (counted in `skipped.paused`) to be found once it resumes.
 */
export function pendingMessages(deps: Pick<GitLabReconcileDeps, 'pools' | 'options' | 'now' | 'gitlab'>, projectId: number, jobs: unknown, skipped = { paused: 0 }): JobMessage[] {
  if (!Array.isArray(jobs)) return [];
  const now = deps.now();
  const out: JobMessage[] = [];
  for (const j of jobs as Record<string, unknown>[]) {
    if (j?.status !== 'pending' || !Number.isSafeInteger(j.id) || !Array.isArray(j.tag_list)) continue;
    if (pendingSeconds(j, now) < deps.options.minQueuedSeconds) continue;
    const labels = (j.tag_list as unknown[]).filter((t): t is string => typeof t === 'string' && t !== '');
    const match = matchPool(candidatePools({ gitlab: deps.gitlab, pools: [...deps.pools] }, { provider: Provider.GITLAB, projectId }), Provider.GITLAB, labels);
    if (!match.pool) continue;
    if (pausedPool(match)) {
      skipped.paused++;
      continue;
    }
    const providerJobId = String(j.id);
    const { owner, project } = projectPath(deps.gitlab.url, j.web_url, projectId);
    // The jobs API's created_at, read as the webhook reads build_created_at (one parser).
    const createdAt = isoTime(j.created_at);
    out.push(
      buildJobMessage(
        { provider: Provider.GITLAB, providerJobId, owner, project, projectId, labels, ...(createdAt ? { createdAt } : {}) },
        { labels, labelsResolved: true, pool: match.pool.name, deliveryId: reconciledGitLabDeliveryId(providerJobId), receivedAt: now },
      ),
    );
  }
  return out;
}

/** How long a job has waited for a runner: `queued_duration` (seconds) when given, else since `created_at`. */
function pendingSeconds(job: Record<string, unknown>, now: Date): number {
  if (typeof job.queued_duration === 'number' && Number.isFinite(job.queued_duration)) return job.queued_duration;
  const createdAt = isoTime(job.created_at);
  const created = createdAt === undefined ? NaN : Date.parse(createdAt);
  // Unknown age: treat it as old enough, the per-job record absorbs a copy of a delivered job.
  return Number.isNaN(created) ? Number.POSITIVE_INFINITY : (now.getTime() - created) / 1000;
}

/** "namespace/project" from a job's `web_url` (`<gitlab>/<path>/-/jobs/<id>`), else a name from the id. */
export function projectPath(gitlabUrl: string, webUrl: unknown, projectId: number): { owner: string; project: string } {
  const base = gitlabUrl.replace(/\/+$/, '');
  const path = typeof webUrl === 'string' && webUrl.startsWith(`${base}/`) ? webUrl.slice(base.length + 1).split('/-/')[0] : undefined;
  const slash = path ? path.lastIndexOf('/') : -1;
  if (!path || slash <= 0 || slash === path.length - 1) return { owner: 'projects', project: `project-${projectId}` };
  return { owner: path.slice(0, slash), project: path.slice(slash + 1) };
}
