import type { Provider } from './boot';
import type { JobMessage } from './job-message';

/** A single-use runner registration, created for one instance and one job. */
export interface RunnerRegistration {
  /** The provider's runner id, tagged on the instance and used to deregister. */
  readonly runnerId: string;
  /** Unique per activation (`runnerName`). */
  readonly name: string;
  /** GitHub: the encoded JIT config; GitLab: the runner authentication token. Never logged. */
  readonly secret: string;
  /** GitLab: the instance URL the runner talks to. */
  readonly url?: string;
}

/**
 * The form in which runner ids are matched (an instance's tag against a provider's list): lower
 * case. GitHub's ids name logins and repositories, which GitHub treats case-insensitively, and
 * fleets before one canonical spelling tagged ids in a pool's spelling (`Acme/App/1`); GitLab's
 * are numeric. The sweep, the retry check and every other match key ids through this.
 */
export function runnerIdKey(runnerId: string): string {
  return runnerId.toLowerCase();
}

export interface RunnerSummary {
  readonly runnerId: string;
  readonly name: string;
  /** As the provider reports it ("online", "offline", ...). */
  readonly status: string;
  /** True while the runner is executing a job, where the provider says. */
  readonly busy?: boolean;
}

export interface CreateRunnerOptions {
  /**
   * Register the runner for the job's own scope alone (reuse, contract reuse.ts R1): GitHub a
   * repository-level runner of the job's repository (`POST /repos/{owner}/{repo}/actions/runners/generate-jitconfig`),
   * GitLab a `project_type` runner of the job's project. Such a runner can be handed no job of
   * another repository or project, whatever its labels.
   */
  readonly scoped?: boolean;
}

export interface ListRunnersOptions {
  /**
   * GitHub: repositories ("owner/repo") whose repository-level runners are listed besides the
   * fleet's own scope: an organisation fleet's scoped runners (`CreateRunnerOptions.scoped`)
   * are listed per repository only. The caller names them (the repositories in the runner-id
   * and affinity tags of the fleet's instances). GitLab lists its project runners without it.
   */
  readonly repositories?: readonly string[];
}

/**
 * What scale-up and scale-down need from a CI service. GitHub and GitLab implement it
 * (`lambdas/ci/`); tests use doubles.
 */
export interface CiProvider {
  readonly provider: Provider;
  /** Registers a single-use runner for `job` on `instanceId`, named uniquely for this activation. */
  createRunner(job: JobMessage, instanceId: string, pool: string, options?: CreateRunnerOptions): Promise<RunnerRegistration>;
  /** Deregisters a runner; resolves also when it is already gone. */
  deleteRunner(runnerId: string): Promise<void>;
  /** The fleet's runners (those named with the fleet prefix), for the sweep. */
  listRunners(options?: ListRunnersOptions): Promise<RunnerSummary[]>;
  /**
   * Whether the job still waits for a runner: false when the service answers with the job in
   * a state that needs none (picked up, finished, cancelled).
   *
   * Throws `JobLookupError` (reason `not-found`) when the service answers 404: that means the
   * job is gone OR the credential may not see it (GitHub and GitLab both answer 404 for "no
   * access"), so the caller must not treat it as "no runner needed": count it, retry and
   * dead-letter it, so a credential or permission problem is visible instead of jobs
   * vanishing silently. Other failures throw the provider's own error.
   */
  isJobQueued(job: JobMessage): Promise<boolean>;
  /**
   * The job's labels or tags, for jobs queued with `labelsResolved: false`. `signal` lets a
   * caller with a tighter deadline than the provider's own (the webhook) abort the lookup.
   * A 404 throws `JobLookupError` as for `isJobQueued`.
   */
  resolveLabels?(job: JobMessage, signal?: AbortSignal): Promise<string[]>;
  /**
   * Whether the runner registered as `runnerId` may take `job` (its scope at the service: a
   * GitHub repository runner takes only its repository's jobs). Absent: every runner of the
   * fleet may take every job it serves (GitLab registers the whole fleet in one scope).
   */
  runnerServes?(runnerId: string, job: JobMessage): boolean;
  /**
   * Whether the runner is running a job now, asked of the service directly (GitLab's running-jobs
   * list), where its runner listing has no busy flag; read just before an idle runner is
   * deregistered. Throws when the service gives no clear answer: unknown is not idle.
   */
  runnerBusy?(runnerId: string): Promise<boolean>;
  /**
   * Pauses (`true`) or unpauses a runner: a paused runner is handed no new job and keeps the one
   * it runs (GitLab's `paused`). Where the service has it, the scale-down pauses an idle runner
   * before its last `runnerBusy` reading, so no job can reach it between that reading and the
   * DELETE. Throws when the service gives no clear answer: read back with `runnerPaused`.
   */
  setRunnerPaused?(runnerId: string, paused: boolean): Promise<void>;
  /** Whether the runner is paused, read back; `undefined` when the service no longer has it. */
  runnerPaused?(runnerId: string): Promise<boolean | undefined>;
}

/** Why a job lookup found nothing; `not-found` is an HTTP 404: gone, or not visible to the credential. */
export type JobLookupFailure = 'not-found';

/**
 * A job the CI service would not show. Thrown by `CiProvider.isJobQueued` and
 * `resolveLabels`, so callers can tell it from "the job needs no runner" and count it.
 */
export class JobLookupError extends Error {
  constructor(
    readonly provider: Provider,
    readonly jobId: string,
    readonly reason: JobLookupFailure,
  ) {
    super(`${provider} job ${jobId}: the job lookup answered ${reason} (the job is gone, or the credential cannot see it)`);
    this.name = 'JobLookupError';
  }
}
