import type { EC2Client } from '@aws-sdk/client-ec2';
import type { SSMClient } from '@aws-sdk/client-ssm';
import { withTimeout, type AwsCaller } from '../shared/aws-call';
import type { CiProvider, FleetConfig, JobMessage, PoolConfig, RunnerConfig, RunnerConfigReuse, RunnerRegistration, SsmPaths, TagKeys } from '../shared/contract';
import type { Logger, Metrics } from '../shared/log';

/** What the activation and cold-launch steps share within one invocation. */
export interface StepContext {
  readonly ec2: EC2Client;
  readonly ssm: SSMClient;
  readonly aws: AwsCaller;
  readonly config: FleetConfig;
  readonly keys: TagKeys;
  readonly paths: SsmPaths;
  /** The ARN of an instance, for the config parameter's `PARAMETER_INSTANCE_ARN_TAG`. */
  readonly instanceArn: (instanceId: string) => string;
  readonly metrics: Metrics;
  readonly log: Logger;
  readonly now: () => Date;
  /** Bound on every CI provider call. */
  readonly ciTimeoutMs: number;
  /** Off only for the benchmark's per-job baseline: one StartInstances per job. */
  readonly batching: boolean;
}

/** A job on its way to an instance, with its own logger (trace id on every line). */
export interface JobInFlight {
  /** SQS message id. */
  readonly key: string;
  readonly job: JobMessage;
  readonly pool: PoolConfig;
  readonly provider: CiProvider;
  readonly log: Logger;
  /**
   * A reusable pool's job: its affinity (decide.ts `reuseAffinityOf`). Its runner is
   * registered for that repository or project alone, and its config carries `reuse`.
   * Undefined for every other job.
   */
  readonly affinity?: string;
}

/** The config for exactly one instance: it names the instance, which refuses any other's. */
export function runnerConfigOf(config: FleetConfig, job: JobMessage, reg: RunnerRegistration, instanceId: string, reuse?: RunnerConfigReuse): RunnerConfig {
  const extra = reuse ? { reuse } : {};
  if (job.provider === 'github') return { provider: 'github', instanceId, jitConfig: reg.secret, ...extra };
  const url = reg.url ?? config.gitlab?.url;
  if (!url) throw new Error('gitlab registration has no url and the fleet config names no gitlab url');
  return { provider: 'gitlab', instanceId, url, token: reg.secret, ...extra };
}

/**
 * Registers a runner; not retried, since a second call could register a second runner. A
 * reusable pool's job gets a runner scoped to its repository or project (R1): even a runner
 * that takes another job than its own (GitHub hands jobs out by label) takes only one of
 * the scope whose caches the instance carries.
 */
export function createRunner(ctx: StepContext, j: JobInFlight, instanceId: string): Promise<RunnerRegistration> {
  const options = j.affinity === undefined ? undefined : { scoped: true };
  return withTimeout(`${j.provider.provider} createRunner`, ctx.ciTimeoutMs, () => j.provider.createRunner(j.job, instanceId, j.pool.name, options));
}

/** The JobsFailed reason of an undo that left something of ours behind for the sweep. */
export const ROLLBACK_INCOMPLETE = 'rollback-incomplete';

/** Deregisters a runner, retried: deleting is idempotent. Never throws; a leftover is swept. */
export async function deleteRunner(ctx: StepContext, j: JobInFlight, runnerId: string): Promise<boolean> {
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      await withTimeout(`${j.provider.provider} deleteRunner`, ctx.ciTimeoutMs, () => j.provider.deleteRunner(runnerId));
      return true;
    } catch (error) {
      j.log.warn('deregistering the runner failed', { runnerId, attempt, error: (error as Error).message });
    }
  }
  return false;
}
