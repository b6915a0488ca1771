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

export interface RunnerSummary {
  readonly runnerId: string;
  readonly name: string;
  /** As the provider reports it ("online", "offline", ...). */
  readonly status: string;
  /** True while the runner is executing a job, where the provider says. */
  readonly busy?: boolean;
}

/**
 * What scale-up and scale-down need from a CI service. GitHub and GitLab implement it
 * (`lambdas/ci/`); tests use doubles.
 */
export interface CiProvider {
  readonly provider: Provider;
  /** Registers a single-use runner for `job` on `instanceId`, named uniquely for this activation. */
  createRunner(job: JobMessage, instanceId: string, pool: string): Promise<RunnerRegistration>;
  /** Deregisters a runner; resolves also when it is already gone. */
  deleteRunner(runnerId: string): Promise<void>;
  /** The fleet's runners (those named with the fleet prefix), for the sweep. */
  listRunners(): Promise<RunnerSummary[]>;
  /** Whether the job still waits for a runner; a job that was cancelled or picked up needs none. */
  isJobQueued(job: JobMessage): Promise<boolean>;
  /**
   * The job's labels or tags, for jobs queued with `labelsResolved: false`. `signal` lets a
   * caller with a tighter deadline than the provider's own (the webhook) abort the lookup.
   */
  resolveLabels?(job: JobMessage, signal?: AbortSignal): Promise<string[]>;
}
