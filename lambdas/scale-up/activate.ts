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
  /**
   * Claim attempts per job and round before it gives up on the warm path. Generous: a lost
   * claim costs one SSM write, a cold launch instead of a free parked instance minutes.
   */
  readonly claimsPerJob: number;
  /** Jobs registering and claiming at once. */
  readonly concurrency: number;
  /**
   * A claim made within this many ms of the observation it was chosen from is tagged at
   * once, without re-observing the instance (see `activateWarm`).
   */
  readonly freshSnapshotMs: number;
}

export const WARM_DEFAULTS: WarmOptions = { rounds: 3, claimsPerJob: 8, concurrency: 10, freshSnapshotMs: 2_000 };

/**
 * The warm path for a batch of jobs: register, claim, (verify,) tag, start.
 *
 * 1. For each job: take the next candidate of its pool (candidates are shared, so jobs of
 *    one invocation never race each other), register a runner for that instance at the CI
 *    provider, and claim the instance with the config write. A lost claim deregisters and
 *    moves to the next candidate, re-observing first (`Candidates`).
 * 2. Tag the claimed instance at once (one CreateTags per instance: activation time, trace
 *    id, job id, runner id; the values differ per instance, so a shared call would only add
 *    a request). Tagging at once makes the claim visible to every other invocation's
 *    DescribeInstances: a claimed but untagged instance looks parked, and in a burst that
 *    empties the pool the last invocations otherwise spend most of their writes on claims
 *    they lose.
 *    The claim write can also succeed on an instance whose earlier owner's boot already
 *    consumed and deleted its config (a slow competitor working from an old observation).
 *    That needs the other owner's tag, start and boot (many seconds on EC2) to fit between
 *    our observation and our claim, so a claim made within `freshSnapshotMs` of the
 *    observation cannot be one; an older claim is re-observed first (one DescribeInstances
 *    for all of them) and must still be a stopped, unactivated warm standby, so we never
 *    write a tag over another owner's.
 * 3. One StartInstances for every instance of the batch, split on failure; a previous state
 *    other than "stopped" is a lost claim.
 * Every failure after the registration rolls back exactly what was done, and the job falls
 * back to a cold launch.
 */
export async function activateWarm(
  ctx: StepContext,
  jobs: readonly JobInFlight[],
  candidates: Candidates,
  options: WarmOptions = WARM_DEFAULTS,
): Promise<Map<string, WarmOutcome>> {
  const names = ctx.config.metrics.names;
  const outcomes = new Map<string, WarmOutcome>();
  const fallback = (j: JobInFlight, reason: FallbackReason) => outcomes.set(j.key, { kind: 'fallback', reason });
  const lost = (j: JobInFlight) => ctx.metrics.add(names.lostClaims, { Pool: j.pool.name });
  // One activation time for the batch, taken at its first tag: the boot script measures
  // the activation-to-runner latency from it.
  let activatedAt: Date | undefined;
  const tagged: Attempt[] = [];
  const tagNow = async (a: Attempt): Promise<void> => {
    try {
      await tag(ctx, a, (activatedAt ??= ctx.now()));
      tagged.push(a);
    } catch (error) {
      a.j.log.error('tagging the claimed instance failed', { instanceId: a.instanceId, error: errorName(error) });
      await rollback(ctx, a, 'tag-failed');
      fallback(a.j, 'tag-error');
    }
  };

  let pending: JobInFlight[] = [...jobs];
  for (let round = 1; round <= options.rounds && pending.length > 0; round++) {
    const toVerify: Attempt[] = [];
    await mapLimit(pending, options.concurrency, async (j) => {
      for (let tries = 0; tries < options.claimsPerJob; tries++) {
        // Wait for the SSM write token first, then pick: paced at 3 writes a second, a pick
        // made before the wait would be seconds old (and likely taken) when it is written.
        await ctx.aws.pace('PutParameter');
        const next = await candidates.next(j.pool.name);
        if (next === undefined) break;
        const { instanceId, observedAt } = next;
        const a: Attempt = { j, instanceId, claimed: false };
        try {
          a.registration = await createRunner(ctx, j, instanceId);
        } catch (error) {
          j.log.error('registering the runner failed', { instanceId, error: errorName(error) });
          fallback(j, 'ci-error');
          return;
        }
        const result = await claim(ctx, a, { paced: true });
        if (result === 'claimed') {
          if (ctx.now().getTime() - observedAt.getTime() <= options.freshSnapshotMs) await tagNow(a);
          else toVerify.push(a);
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
        candidates.lost();
        j.log.info('claim lost to another invocation', { instanceId });
      }
    });
    pending = [];
    const verified = await verify(ctx, toVerify);
    await mapLimit(verified, options.concurrency, async (v) => {
      if (v.ok) return tagNow(v.attempt);
      await rollback(ctx, v.attempt, v.reason);
      if (v.reason === 'verify-error') fallback(v.attempt.j, 'verify-error');
      else {
        lost(v.attempt.j);
        pending.push(v.attempt.j);
      }
    });
  }
  for (const j of jobs) if (!outcomes.has(j.key) && !tagged.some((a) => a.j === j)) fallback(j, 'lost-claims');

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

/**
 * The parked instances this invocation may claim, each handed out once. The list is
 * re-observed before the next pick when a claim was lost (in a burst, other invocations have
 * claimed and tagged instances since) or when it is older than `freshMs` (paced writes wait):
 * one DescribeInstances shared by every lane waiting meanwhile, at most `maxRefreshes` times.
 * Re-observing is cheap (its bucket is 100 requests, 20/s) next to a lost claim, which
 * costs an SSM write from a bucket of 3 a second.
 */
export class Candidates {
  private lists: Map<string, string[]>;
  private observedAt: Date;
  private readonly handedOut = new Set<string>();
  private stale = false;
  private refreshing: Promise<void> | undefined;
  private refreshes = 0;

  constructor(
    initial: ReadonlyMap<string, readonly string[]>,
    observedAt: Date,
    private readonly refresh?: () => Promise<ReadonlyMap<string, readonly string[]>>,
    private readonly now: () => Date = () => new Date(),
    private readonly freshMs = WARM_DEFAULTS.freshSnapshotMs,
    private readonly maxRefreshes = 10,
  ) {
    this.lists = new Map([...initial].map(([pool, ids]) => [pool, [...ids]]));
    this.observedAt = observedAt;
  }

  async next(pool: string): Promise<{ instanceId: string; observedAt: Date } | undefined> {
    const old = this.now().getTime() - this.observedAt.getTime() > this.freshMs;
    if ((this.stale || old) && this.refresh && this.refreshes < this.maxRefreshes) {
      this.refreshing ??= this.reobserve(this.refresh);
      await this.refreshing;
    }
    const list = this.lists.get(pool) ?? [];
    for (let id = list.shift(); id !== undefined; id = list.shift()) {
      if (!this.handedOut.has(id)) {
        this.handedOut.add(id);
        return { instanceId: id, observedAt: this.observedAt };
      }
    }
    return undefined;
  }

  lost(): void {
    this.stale = true;
  }

  private async reobserve(refresh: () => Promise<ReadonlyMap<string, readonly string[]>>): Promise<void> {
    this.refreshes++;
    this.stale = false;
    const at = this.now();
    try {
      const fresh = await refresh();
      this.lists = new Map([...fresh].map(([pool, ids]) => [pool, ids.filter((id) => !this.handedOut.has(id))]));
      this.observedAt = at;
    } catch {
      // Keep the old list: it is still a list of candidates, and each claim is still atomic.
    } finally {
      this.refreshing = undefined;
    }
  }
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
