import { JobLookupError, runnerName, Provider, type CiProvider, type CreateRunnerOptions, type JobMessage, type ListRunnersOptions, type RunnerRegistration, type RunnerSummary } from '../../lambdas/shared/contract';

/** A CI provider double: registrations in memory, with switches to make calls fail or hang. */
export class FakeCi implements CiProvider {
  readonly runners = new Map<string, { runnerId: string; name: string; status: string; busy?: boolean; instanceId: string; jobId: string }>();
  readonly deleted: string[] = [];
  created = 0;
  /**
   * Runner ids registered with `scoped` (reuse), with the job's "owner/repo": as at GitHub,
   * `listRunners` shows one only when its repository is named.
   */
  readonly scoped = new Map<string, string>();
  /** Return an Error to make createRunner fail for that instance. */
  failCreate: (instanceId: string) => Error | undefined = () => undefined;
  failDelete = 0;
  notQueued = new Set<string>();
  labels = new Map<string, string[]>();
  /** Jobs whose look-up answers 404 (gone, or not visible to the credential). */
  lookupNotFound = new Set<string>();
  lookups = 0;
  private serial = 0;

  constructor(
    readonly provider: Provider = Provider.GITHUB,
    private readonly prefix = 'test',
    private readonly clock: () => number = Date.now,
  ) {}

  async createRunner(job: JobMessage, instanceId: string, _pool: string, options: CreateRunnerOptions = {}): Promise<RunnerRegistration> {
    const failure = this.failCreate(instanceId);
    if (failure) throw failure;
    this.created++;
    const runnerId = String(++this.serial);
    if (options.scoped) this.scoped.set(runnerId, `${job.owner}/${job.project}`.toLowerCase());
    const name = runnerName(this.prefix, instanceId, new Date(this.clock() + this.serial));
    this.runners.set(runnerId, { runnerId, name, status: 'offline', busy: false, instanceId, jobId: job.jobId });
    return { runnerId, name, secret: `jit-secret-${runnerId}`, ...(this.provider === 'gitlab' ? { url: 'https://gitlab.example.com' } : {}) };
  }

  async deleteRunner(runnerId: string): Promise<void> {
    if (this.failDelete > 0) {
      this.failDelete--;
      throw new Error('ci unavailable');
    }
    // As GitHub answers 422 for a runner that is running a job.
    if (this.runners.get(runnerId)?.busy === true) throw new Error('runner is busy');
    this.deleted.push(runnerId);
    this.runners.delete(runnerId);
  }

  async listRunners(options: ListRunnersOptions = {}): Promise<RunnerSummary[]> {
    const listed = (runnerId: string) => !this.scoped.has(runnerId) || (options.repositories ?? []).includes(this.scoped.get(runnerId)!);
    return [...this.runners.values()].filter((r) => listed(r.runnerId)).map(({ runnerId, name, status, busy }) => ({ runnerId, name, status, ...(busy === undefined ? {} : { busy }) }));
  }

  async isJobQueued(job: JobMessage): Promise<boolean> {
    this.lookups++;
    if (this.lookupNotFound.has(job.jobId)) throw new JobLookupError(this.provider, job.providerJobId, 'not-found');
    return !this.notQueued.has(job.jobId);
  }

  async resolveLabels(job: JobMessage): Promise<string[]> {
    this.lookups++;
    if (this.lookupNotFound.has(job.jobId)) throw new JobLookupError(this.provider, job.providerJobId, 'not-found');
    return this.labels.get(job.jobId) ?? [...job.labels];
  }
}
