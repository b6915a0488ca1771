import { errorName, mapLimit } from '../shared/aws-call';
import { WARM_STANDBY_VALUE } from '../shared/contract';
import { describeFleet, isActivated, type ObservedInstance } from '../shared/instances';
import { claim, rollback, tag, type Attempt } from './claim';
import { createRunner, deleteRunner, type JobInFlight, type StepContext } from './context';
import { startInstances, type StartOutcome } from './start';

/** Why a job that was meant to go warm goes cold; each is logged and counted. */
export type FallbackReason =
  | 'lost-claims'
  | 'ci-error'
  | 'claim-error'
  | 'verify-error'
  | 'tag-error'
  | 'start-lost'
  | 'start-failed';

export type WarmOutcome =
  | { readonly kind: 'started'; readonly instanceId: string; readonly runnerId: string }
  | { readonly kind: 'fallback'; readonly reason: FallbackReason };

export interface WarmOptions {
  /** Claim rounds: a claim that verification finds stale sends its job to another round. */
  readonly rounds: number;
  /** Claim attempts per job and round before it gives up on the warm path. */
  readonly claimsPerJob: number;
  /** Jobs registering and claiming at once. */
  readonly concurrency: number;
}

export const WARM_DEFAULTS: WarmOptions = { rounds: 3, claimsPerJob: 4, concurrency: 10 };

/**
 * The warm path for a batch of jobs: register, claim, verify, tag, start.
 *
 * 1. For each job: take the next candidate of its pool (candidates are shared, so jobs of
 *    one invocation never race each other), register a runner for that instance at the CI
 *    provider, and claim the instance with the config write. A lost claim deregisters and
 *    moves to the next candidate.
 * 2. Verify all claims with one DescribeInstances: the instance must still be a stopped,
 *    unactivated warm standby. The claim write can succeed on an instance whose earlier
 *    owner's boot already consumed and deleted its config (a slow competitor working from
 *    an old snapshot): such an instance is running and tagged, so verification rejects it
 *    before we write a single tag on it.
 * 3. One CreateTags per instance (activation time, trace id, job id, runner id: the values
 *    differ per instance, so a shared call would only add a request).
 * 4. One StartInstances for every instance of the batch, split on failure; a previous state
 *    other than "stopped" is a lost claim.
 * Every failure after the registration rolls back exactly what was done, and the job falls
 * back to a cold launch.
 */
export async function activateWarm(
  ctx: StepContext,
  jobs: readonly JobInFlight[],
  candidates: ReadonlyMap<string, readonly string[]>,
  options: WarmOptions = WARM_DEFAULTS,
): Promise<Map<string, WarmOutcome>> {
  const names = ctx.config.metrics.names;
  const outcomes = new Map<string, WarmOutcome>();
  const cursor = new Map<string, number>();
  const nextCandidate = (pool: string): string | undefined => {
    const i = cursor.get(pool) ?? 0;
    cursor.set(pool, i + 1);
    return candidates.get(pool)?.[i];
  };
  const fallback = (j: JobInFlight, reason: FallbackReason) => outcomes.set(j.key, { kind: 'fallback', reason });
  const lost = (j: JobInFlight) => ctx.metrics.add(names.lostClaims, { Pool: j.pool.name });

  let pending: JobInFlight[] = [...jobs];
  const claimed: Attempt[] = [];
  for (let round = 1; round <= options.rounds && pending.length > 0; round++) {
    const roundClaims: Attempt[] = [];
    await mapLimit(pending, options.concurrency, async (j) => {
      for (let tries = 0; tries < options.claimsPerJob; tries++) {
        const instanceId = nextCandidate(j.pool.name);
        if (instanceId === undefined) break;
        const a: Attempt = { j, instanceId, claimed: false };
        try {
          a.registration = await createRunner(ctx, j, instanceId);
        } catch (error) {
          j.log.error('registering the runner failed', { instanceId, error: errorName(error) });
          fallback(j, 'ci-error');
          return;
        }
        const result = await claim(ctx, a);
        if (result === 'claimed') {
          roundClaims.push(a);
          return;
        }
        if (!(await deleteRunner(ctx, j, a.registration.runnerId))) {
          ctx.metrics.add(names.jobsFailed, { Pool: j.pool.name, Reason: 'rollback-incomplete' });
        }
        if (result === 'failed') {
          fallback(j, 'claim-error');
          return;
        }
        lost(j);
        j.log.info('claim lost to another invocation', { instanceId });
      }
    });
    pending = [];
    for (const a of await verify(ctx, roundClaims)) {
      if (a.ok) {
        claimed.push(a.attempt);
        continue;
      }
      await rollback(ctx, a.attempt, a.reason);
      if (a.reason === 'verify-error') fallback(a.attempt.j, 'verify-error');
      else {
        lost(a.attempt.j);
        pending.push(a.attempt.j);
      }
    }
  }
  for (const j of jobs) if (!outcomes.has(j.key) && !claimed.some((a) => a.j === j)) fallback(j, 'lost-claims');

  // One activation time for the batch: the boot script measures latency from it.
  const activatedAt = ctx.now();
  const tagged: Attempt[] = [];
  await mapLimit(claimed, options.concurrency, async (a) => {
    try {
      await tag(ctx, a, activatedAt);
      tagged.push(a);
    } catch (error) {
      a.j.log.error('tagging the claimed instance failed', { instanceId: a.instanceId, error: errorName(error) });
      await rollback(ctx, a, 'tag-failed');
      fallback(a.j, 'tag-error');
    }
  });

  const starts = new Map<string, StartOutcome>();
  const deps = { aws: ctx.aws, ec2: ctx.ec2, keys: ctx.keys, log: ctx.log };
  if (ctx.batching) {
    for (const [id, o] of await startInstances(deps, tagged.map((a) => a.instanceId))) starts.set(id, o);
  } else {
    for (const a of tagged) for (const [id, o] of await startInstances(deps, [a.instanceId])) starts.set(id, o);
  }
  for (const a of tagged) {
    const o = starts.get(a.instanceId) ?? 'failed';
    if (o === 'started') {
      outcomes.set(a.j.key, { kind: 'started', instanceId: a.instanceId, runnerId: a.registration!.runnerId });
      continue;
    }
    if (o === 'lost') lost(a.j);
    a.j.log.warn(o === 'lost' ? 'instance was not stopped when started: claim lost' : 'starting the instance failed', { instanceId: a.instanceId });
    await rollback(ctx, a, o === 'lost' ? 'start-lost' : 'start-failed');
    fallback(a.j, o === 'lost' ? 'start-lost' : 'start-failed');
  }
  return outcomes;
}

type Verified = { attempt: Attempt; ok: true } | { attempt: Attempt; ok: false; reason: 'stale-observation' | 'verify-error' };

/** A claimed instance must still be a stopped, unactivated warm standby: observed now, not in the snapshot. */
async function verify(ctx: StepContext, attempts: readonly Attempt[]): Promise<Verified[]> {
  if (attempts.length === 0) return [];
  const groups = ctx.batching ? [attempts] : attempts.map((a) => [a]);
  const result: Verified[] = [];
  for (const group of groups) {
    let observed: ObservedInstance[];
    try {
      observed = await describeFleet(ctx.aws, ctx.ec2, ctx.keys, {
        instanceIds: group.map((a) => a.instanceId),
        states: ['pending', 'running', 'stopping', 'stopped', 'shutting-down', 'terminated'],
      });
    } catch (error) {
      ctx.log.error('verifying claims failed', { instances: group.length, error: errorName(error) });
      for (const attempt of group) result.push({ attempt, ok: false, reason: 'verify-error' });
      continue;
    }
    const byId = new Map(observed.map((i) => [i.id, i]));
    for (const attempt of group) {
      const i = byId.get(attempt.instanceId);
      const ok = i !== undefined && i.state === 'stopped' && i.tags.get(ctx.keys.warmStandby) === WARM_STANDBY_VALUE && !isActivated(i, ctx.keys);
      if (ok) result.push({ attempt, ok: true });
      else {
        attempt.j.log.warn('claimed instance is no longer a parked standby: claim lost', { instanceId: attempt.instanceId, state: i?.state ?? 'gone' });
        result.push({ attempt, ok: false, reason: 'stale-observation' });
      }
    }
  }
  return result;
}
