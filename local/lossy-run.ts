import { instanceIdOfRunnerName } from '../lambdas/shared/contract';
import type { GitHubJob, LoopbackGitHub } from './ci/github-server';
import type { GitLabJob, LoopbackGitLab } from './ci/gitlab-server';
import type { StrayRunners } from './ci/server-basics';
import { githubWorkflowJobQueued, gitlabJobPending, type Delivery } from './deliveries';
import type { LocalEvent } from './events';
import type { DeliveryFate, FaultPlan } from './fault-plan';

/**
 * The lossy faults of one run, applied where they arrive: a delivery dropped before the webhook
 * (no delivery record: only the reconciler's listing finds the job), one answered 5xx (the
 * provider logs a failed delivery, which the reconciler redelivers through `redeliver` /
 * `resend`), the stray runners of the plan's GitHub jobs, and the cancelled job. Without a plan
 * every job is delivered and no runner strays.
 */
export class LossyRun {
  /** CI job ids in the order the scenario created them: the plan's indexes. */
  private readonly created = { github: [] as number[], gitlab: [] as number[] };
  private link: LossyLink | undefined;
  /** Jobs the plan cancels that were no longer queued when the cancel came (then served as any other). */
  readonly cancelRefused: string[] = [];

  constructor(
    readonly plan: FaultPlan | undefined,
    private readonly prefix: string,
    private readonly events: readonly LocalEvent[],
  ) {}

  /** The webhook and the servers, once the fleet is provisioned (the servers start before it). */
  connect(link: LossyLink): void {
    this.link = link;
  }

  /** Records the job just created and returns what the plan does to its delivery. */
  fateOfNext(provider: 'github' | 'gitlab', jobId: number): DeliveryFate {
    const index = this.created[provider].push(jobId) - 1;
    return this.plan?.fates[provider][index] ?? 'delivered';
  }

  /** A delivery that never reaches the webhook: dropped (status 0, nothing logged) or 5xx (logged as failed). */
  lose(provider: 'github' | 'gitlab', jobId: number, fate: DeliveryFate): number {
    if (fate !== 'failed') return 0;
    const status = 502;
    if (provider === 'github') this.link!.github.recordDelivery(jobId, status);
    else this.link!.gitlab.recordHookEvent(jobId, status);
    return status;
  }

  /** Cancels the plan's cancelled (GitLab) job after its delivery; true when it was cancelled. */
  cancelsAfterDelivery(jobId: number): boolean {
    if (!this.plan || this.created.gitlab[this.plan.cancelled] !== jobId) return false;
    try {
      this.link!.gitlab.cancelJob(jobId);
      return true;
    } catch {
      // A runner took it already (the oldest job goes first): it is then served like any other.
      this.cancelRefused.push(`gitlab:${jobId}`);
      return false;
    }
  }

  /** The loopback GitHub's stray modes: the plan's jobs' first runners take another job's job / die. */
  strays(): StrayRunners {
    return {
      ownJob: (name) => this.ownJob(name),
      takesAnotherJob: (name) => this.plan !== undefined && this.isFirstRunnerOf(this.plan.takesAnother, name),
      diesBeforeJob: (name) => this.plan !== undefined && this.isFirstRunnerOf(this.plan.dies, name),
    };
  }

  /** GitHub's redelivery of a failed delivery: the job's queued delivery with its GUID, to the webhook. */
  redeliver({ guid, job }: { readonly guid: string; readonly job: GitHubJob }): Promise<number> {
    const l = this.link!;
    return l.deliver(`github redelivery of job ${job.id}`, githubWorkflowJobQueued({ jobId: job.id, runId: job.runId, repository: job.repository, labels: job.labels }, l.secrets.githubSecret, guid));
  }

  /** GitLab's resend of a failed hook event, with its Idempotency-Key. */
  resend({ idempotencyKey, job, projectPath }: { readonly idempotencyKey: string; readonly job: GitLabJob; readonly projectPath: string }): Promise<number> {
    const l = this.link!;
    return l.deliver(`gitlab resend of job ${job.id}`, gitlabJobPending({ buildId: job.id, projectId: job.projectId, projectPath }, l.secrets.gitlabToken, idempotencyKey));
  }

  /** The GitHub job a runner was started for: the job of the first activation of its instance. */
  private ownJob(runnerName: string): number | undefined {
    const instanceId = instanceIdOfRunnerName(this.prefix, runnerName);
    const started = this.events.find((e) => e.kind === 'started' && e.instanceId === instanceId && e.provider === 'github');
    return started?.ciJobId === undefined ? undefined : Number(started.ciJobId);
  }

  /** Whether the runner is the first one started for the plan's `index`-th GitHub job (a retry's runner behaves). */
  private isFirstRunnerOf(index: number, runnerName: string): boolean {
    const jobId = this.created.github[index];
    if (jobId === undefined) return false;
    const first = this.events.find((e) => e.kind === 'started' && e.provider === 'github' && e.ciJobId === String(jobId));
    return first?.instanceId !== undefined && first.instanceId === instanceIdOfRunnerName(this.prefix, runnerName);
  }
}

export interface LossyLink {
  readonly deliver: (what: string, d: Delivery) => Promise<number>;
  readonly secrets: { readonly githubSecret: string; readonly gitlabToken: string };
  readonly github: LoopbackGitHub;
  readonly gitlab: LoopbackGitLab;
}
