import { describeError, errorName, mapLimit } from '../shared/aws-call';
import { WARM_STANDBY_VALUE, type RunnerRegistration } from '../shared/contract';
import { ALL_STATES, describeFleet, isActivated, type ObservedInstance } from '../shared/instances';
import { claim, configValue, rollback, tag, type Attempt } from './claim';
import { bucketOf, bucketsFor, usesOf } from './decide';
import { createRunner, deleteRunner, type JobInFlight, type StepContext } from './context';
import { startInstances, type StartOutcome } from './start';

/** Why a job that was meant to go warm goes cold; each is logged and counted. */
export type FallbackReason =
  | 'lost-claims'
  | 'ci-error'
  | 'claim-error'
  | 'config-error'
  | 'verify-error'
  | 'tag-error'
  | 'start-lost'
  | 'start-failed'
  /** Something threw in the job's lane (a bug, or an answer no step expected): rolled back. */
  | 'activation-error'
  /** The invocation's time ran low before the lane's next claim (`activateWarm`'s `outOfTime`): nothing of it is on an instance. */
  | 'out-of-time';

export type WarmOutcome =
  /** `hit`: the instance parked with the job's affinity (a reuse hit); false for a fresh one. */
  | { readonly kind: 'started'; readonly instanceId: string; readonly runnerId: string; readonly stages: ActivationStages; readonly hit: boolean }
  | { readonly kind: 'fallback'; readonly reason: FallbackReason; readonly carried?: Carried };

/**
 * A runner registration made for a candidate whose claim was refused, carried to the job's
 * next candidate or its cold launch (whoever ends the job's attempt without using it
 * deletes it). Only a refused claim hands one on: nothing of ours reached that instance, so
 * no instance can have read it. The runner's name keeps the instance id it was registered
 * for: the name says the runner is this fleet's and when it was made; which instance runs
 * it is the instance's runner-id tag (the sweep matches runners to instances by that tag).
 */
export interface Carried {
  readonly registration: RunnerRegistration;
  readonly registeredAt: Date;
}

/** When the activation's steps answered, for the job's latency ledger. */
export interface ActivationStages {
  readonly registeredAt?: Date;
  readonly claimedAt?: Date;
  readonly startedAt: Date;
}

export interface WarmOptions {
  /**
   * Claim attempts per job from the candidate lists at hand (a claim lost at the write or
   * found stale by its verification counts); past them, each pick waits for an observation
   * taken then, and the job gives up on the warm path only when one shows no parked instance
   * left for it. A lost claim costs one SSM write, a cold launch instead of a free parked
   * instance minutes.
   */
  readonly claimsPerJob: number;
  /** Jobs registering and claiming at once. */
  readonly concurrency: number;
  /**
   * A claim answered within this many ms of the observation it was chosen from is tagged at
   * once, without re-observing the instance (see `activateWarm`).
   */
  readonly freshSnapshotMs: number;
}

export const WARM_DEFAULTS: WarmOptions = { claimsPerJob: 8, concurrency: 10, freshSnapshotMs: 2_000 };

/**
 * The warm path for a batch of jobs: (register,) claim, (verify,) tag, start.
 *
 * 1. For each job: take the next candidate of its pool (candidates are shared, so jobs of
 *    one invocation never race each other) and claim it. The job registers its runner
 *    once, before its first claim, and each claim writes the config itself (one SSM write);
 *    a refused claim carries the registration to the next candidate (see `lane`,
 *    `Carried`). A lost claim moves to the next candidate, re-observing first (`Candidates`).
 * 2. Tag the claimed instance at once (one CreateTags per instance: activation time, trace
 *    id, job id, runner id; the values differ per instance, so a shared call would only add
 *    a request). Tagging at once makes the claim visible to every other invocation's
 *    DescribeInstances: a claimed but untagged instance looks parked, and every invocation
 *    that observes it meanwhile may spend a write on a claim it must lose.
 *    The claim write can also succeed on an instance whose earlier owner's boot already
 *    consumed and deleted its config (a slow competitor working from an old observation).
 *    That needs the other owner's tag, start and boot (many seconds on EC2) to fit between
 *    our observation and our claim, so a claim answered within `freshSnapshotMs` of the
 *    observation cannot be one. An older claim is verified before its tag, by a
 *    DescribeInstances of the claimed instances started after its answer (`ClaimCheck`):
 *    it must still be a stopped, unactivated warm standby, so we never write a tag over
 *    another owner's. The lane waits for that check alone, and the check is small (by
 *    instance id, shared by the claims answered meanwhile): how slow the invocation or
 *    EC2 is decides how many claims need checking, not how long a claimed instance stays
 *    untagged.
 * 3. One StartInstances for every instance of the batch, split on failure; a previous state
 *    other than "stopped" is a lost claim.
 * Every failure after the claim rolls back exactly what was done, and the job falls
 * back to a cold launch.
 */
export async function activateWarm(
  ctx: StepContext,
  jobs: readonly JobInFlight[],
  candidates: Candidates,
  options: WarmOptions = WARM_DEFAULTS,
  /** The `uses` tag of a parked instance as last observed (decide.ts `usesOf`): the config of a reusable pool's job carries it. */
  usesOf: (instanceId: string) => number = () => 0,
  /**
   * Whether too little of the invocation is left for another claim and its rollback: a lane
   * asks before each claim (its registration first) and, when it is, ends `out-of-time` (with the registration a refused
   * claim left it, if any) instead of claiming. The scale-set demand path's time budget.
   */
  outOfTime: () => boolean = () => false,
): Promise<Map<string, WarmOutcome>> {
  const b: WarmBatch = {
    ctx,
    candidates,
    options,
    usesOf,
    outOfTime,
    outcomes: new Map(),
    carried: new Map(),
    tagged: [],
    check: new ClaimCheck((ids) => describeFleet(ctx.aws, ctx.ec2, ctx.keys, { instanceIds: ids, states: ALL_STATES })),
  };
  await mapLimit(jobs, options.concurrency, (j) => runLane(b, j));
  for (const j of jobs) if (!b.outcomes.has(j.key) && !b.tagged.some((a) => a.j === j)) fallback(b, j, 'lost-claims');
  await startTagged(b);
  return b.outcomes;
}

/** What the lanes of one batch share. */
interface WarmBatch {
  readonly ctx: StepContext;
  readonly candidates: Candidates;
  readonly options: WarmOptions;
  readonly usesOf: (instanceId: string) => number;
  readonly outOfTime: () => boolean;
  readonly outcomes: Map<string, WarmOutcome>;
  /** Registrations kept from refused claims, per job: the next candidate's, or the cold launch's. */
  readonly carried: Map<string, Carried>;
  /** Claimed and tagged, waiting for the batch's start. */
  readonly tagged: Attempt[];
  readonly check: ClaimCheck;
  /** One activation time for the batch, taken at its first tag: the boot script measures the activation-to-runner latency from it. */
  activatedAt?: Date;
}

function fallback(b: WarmBatch, j: JobInFlight, reason: FallbackReason): void {
  const held = b.carried.get(j.key);
  b.outcomes.set(j.key, { kind: 'fallback', reason, ...(held ? { carried: held } : {}) });
}

/** A claim lost to another owner: counted, and the next pick waits for a newer observation. */
function lostClaim(b: WarmBatch, j: JobInFlight): void {
  b.ctx.metrics.add(b.ctx.config.metrics.names.lostClaims, { Pool: j.pool.name });
  b.candidates.lost();
}

/**
 * One job's lane, guarded. What the lane is working on: a throw anywhere in it rolls back
 * exactly that and sends this job cold, while the other lanes go on to their start or
 * rollback. An escaping throw would end the batch with other lanes' instances tagged but
 * never started nor rolled back.
 */
async function runLane(b: WarmBatch, j: JobInFlight): Promise<void> {
  let current: Attempt | undefined;
  try {
    await lane(b, j, (a) => (current = a));
  } catch (error) {
    j.log.error('activation failed unexpectedly, rolling back', { instanceId: current?.instanceId, error: describeError(error) });
    if (current) await rollback(b.ctx, current, 'activation-error');
    const held = b.carried.get(j.key);
    b.carried.delete(j.key);
    // A registration that cannot be deleted stays for the sweep's no-instance rule: counted as a rollback step that failed.
    if (held && held.registration !== current?.registration && !(await deleteRunner(b.ctx, j, held.registration.runnerId))) {
      b.ctx.metrics.add(b.ctx.config.metrics.names.jobsFailed, { Pool: j.pool.name, Reason: 'rollback-incomplete' });
    }
    fallback(b, j, 'activation-error');
  }
}

/**
 * One job's claims. The job registers its runner once, before its first claim, and claims
 * with the config itself: one SSM write per claim, the warm path's bottleneck (PutParameter
 * is paced at about 3 a second). A claim refused (ParameterAlreadyExists: nothing of ours
 * is on that instance) keeps the registration for the next candidate, and for the cold
 * launch if the job goes cold: one registration per served job under any contention (the
 * config names the instance it is for; the runner name keeps its first candidate's id,
 * see `Carried`). `track` names the attempt in progress (undefined once it is undone or
 * handed on to the start).
 */
async function lane(b: WarmBatch, j: JobInFlight, track: (a: Attempt | undefined) => void): Promise<void> {
  for (let tries = 0; ; tries++) {
    const next = await pick(b, bucketsFor(j.pool.name, j.affinity), tries);
    if (next === undefined) return;
    // Asked after the pick's wait for the write token: that wait can be long under contention.
    if (b.outOfTime()) {
      fallback(b, j, 'out-of-time');
      return;
    }
    const a: Attempt = { j, instanceId: next.instanceId, claimed: false, ...reuseOf(b, j, next) };
    track(a);
    if (!(await register(b, a))) {
      track(undefined);
      fallback(b, j, 'ci-error');
      return;
    }
    const step = await claimOne(b, a, next.observedAt, track);
    if (step === 'tag') await tagClaimed(b, a);
    track(undefined);
    if (step !== 'next') return;
  }
}

/**
 * The lane's next candidate. It waits for the SSM write token first, then picks: paced at 3
 * writes a second, a pick made before the wait would be seconds old (and likely taken) when
 * it is written. Past `claimsPerJob` picks, or once the list at hand runs dry, a pick comes
 * only from an observation taken now: the job goes cold only when one shows no parked
 * instance left for it (each instance is handed out once per invocation, so this ends).
 */
async function pick(b: WarmBatch, buckets: readonly string[], tries: number): Promise<Pick_ | undefined> {
  await b.ctx.aws.pace('PutParameter');
  const fresh = tries >= b.options.claimsPerJob;
  return (await b.candidates.next(buckets, { fresh })) ?? (fresh ? undefined : await b.candidates.next(buckets, { fresh: true }));
}

type Pick_ = { instanceId: string; observedAt: Date; bucket: string };

/**
 * What a pick makes of a reusable pool's attempt: the config's `reuse` keys (the job's
 * affinity, the instance's use count: 0 for a fresh one) and whether it is a reuse hit (the
 * pick came from the affinity's list). Nothing for any other job.
 */
function reuseOf(b: WarmBatch, j: JobInFlight, p: Pick_): Pick<Attempt, 'reuse' | 'hit'> {
  if (j.affinity === undefined) return {};
  const hit = p.bucket === bucketOf(j.pool.name, j.affinity);
  return { reuse: { affinity: j.affinity, uses: hit ? b.usesOf(p.instanceId) : 0 }, hit };
}

/** The attempt's registration: the one its job carries from a refused claim, or a new one; false when registering failed. */
async function register(b: WarmBatch, a: Attempt): Promise<boolean> {
  const held = b.carried.get(a.j.key);
  b.carried.delete(a.j.key);
  if (held) {
    a.registration = held.registration;
    a.registeredAt = held.registeredAt;
    return true;
  }
  try {
    a.registration = await createRunner(b.ctx, a.j, a.instanceId);
    a.registeredAt = b.ctx.now();
    return true;
  } catch (error) {
    a.j.log.error('registering the runner failed', { instanceId: a.instanceId, error: errorName(error) });
    return false;
  }
}

/** After a claim attempt: try the next candidate, stop (the job's outcome is set), or tag the claimed instance. */
type ClaimStep = 'next' | 'stop' | 'tag';

/** Claims the attempt's instance, and verifies a claim answered long after its observation (see `activateWarm`). */
async function claimOne(b: WarmBatch, a: Attempt, observedAt: Date, track: (a: Attempt | undefined) => void): Promise<ClaimStep> {
  const ctx = b.ctx;
  const j = a.j;
  const result = await claim(ctx, a, configValue(ctx, a), { paced: true });
  if (result === 'lost') {
    // Refused: the parameter is someone else's and nothing of ours is on the instance.
    b.carried.set(j.key, { registration: a.registration!, registeredAt: a.registeredAt! });
    track(undefined);
    lostClaim(b, j);
    j.log.info('claim lost to another invocation', { instanceId: a.instanceId });
    return 'next';
  }
  if (result === 'failed') {
    await rollback(ctx, a, 'claim-error');
    fallback(b, j, 'claim-error');
    return 'stop';
  }
  a.claimedAt = ctx.now();
  if (!needsVerifying(a.claimedAt, observedAt, b.options.freshSnapshotMs)) return 'tag';
  const verdict = await verify(ctx, a, b.check);
  if (verdict === 'parked') return 'tag';
  // Our config sat on an instance that is not a parked standby: its registration goes with
  // the rollback, never to another instance.
  await rollback(ctx, a, verdict);
  if (verdict === 'verify-error') {
    fallback(b, j, 'verify-error');
    return 'stop';
  }
  lostClaim(b, j);
  return 'next';
}

/**
 * Whether a claim must be verified before its tag: one answered within `freshMs` of the
 * observation it was chosen from cannot be on an instance whose earlier owner has since
 * tagged, started and booted it (many seconds on EC2).
 */
export function needsVerifying(claimedAt: Date, observedAt: Date, freshMs: number): boolean {
  return claimedAt.getTime() - observedAt.getTime() > freshMs;
}

/** Tags a claimed instance for the batch's start, or rolls the attempt back and sends its job cold. */
async function tagClaimed(b: WarmBatch, a: Attempt): Promise<void> {
  try {
    await tag(b.ctx, a, (b.activatedAt ??= b.ctx.now()));
  } catch (error) {
    a.j.log.error('tagging the claimed instance failed', { instanceId: a.instanceId, error: errorName(error) });
    await rollback(b.ctx, a, 'tag-error');
    fallback(b, a.j, 'tag-error');
    return;
  }
  b.tagged.push(a);
}

/** One StartInstances for the batch's tagged instances (one per instance without batching), then each job's outcome. */
async function startTagged(b: WarmBatch): Promise<void> {
  const { ctx } = b;
  const starts = new Map<string, StartOutcome>();
  const deps = { aws: ctx.aws, ec2: ctx.ec2, keys: ctx.keys, log: ctx.log };
  const groups = ctx.batching ? [b.tagged.map((a) => a.instanceId)] : b.tagged.map((a) => [a.instanceId]);
  for (const ids of groups) for (const [id, o] of await startInstances(deps, ids)) starts.set(id, o);
  const startedAt = ctx.now();
  for (const a of b.tagged) await settleStart(b, a, starts.get(a.instanceId) ?? 'failed', startedAt);
}

/** A started instance is the job's; any other outcome rolls the attempt back and sends the job cold. */
async function settleStart(b: WarmBatch, a: Attempt, o: StartOutcome, startedAt: Date): Promise<void> {
  if (o === 'started') {
    const stages = { ...(a.registeredAt ? { registeredAt: a.registeredAt } : {}), ...(a.claimedAt ? { claimedAt: a.claimedAt } : {}), startedAt };
    b.outcomes.set(a.j.key, { kind: 'started', instanceId: a.instanceId, runnerId: a.registration!.runnerId, stages, hit: a.hit === true });
    return;
  }
  if (o === 'lost') b.ctx.metrics.add(b.ctx.config.metrics.names.lostClaims, { Pool: a.j.pool.name });
  a.j.log.warn(o === 'lost' ? 'instance was not stopped when started: claim lost' : 'starting the instance failed', { instanceId: a.instanceId });
  await rollback(b.ctx, a, o === 'lost' ? 'start-lost' : 'start-failed');
  fallback(b, a.j, o === 'lost' ? 'start-lost' : 'start-failed');
}

interface Observation {
  /** Observations are numbered as they start; the handler's own is 0. */
  readonly seq: number;
  /** When it was asked for: EC2's answer shows the state at some moment after this. */
  readonly at: Date;
}

/**
 * The parked instances this invocation may claim, each handed out once, and the
 * observations of the fleet they come from. The observations form one stream per
 * invocation, at most one DescribeInstances in flight: a lane that needs a newer
 * observation than the latest and the one in flight waits for that one to end, and then
 * one new observation serves every lane waiting. A lane needs one for a pick from a list
 * older than `freshMs` (or than two observations, when they take long) and for a pick after
 * a lost claim (in a burst, other invocations have claimed and tagged instances since). So
 * the slower the invocation (or EC2's answers), the more lanes share each observation:
 * their number follows the time the lanes are busy, not the number of picks, and at most
 * `maxRefreshes`. Re-observing is cheap (its bucket is 100 requests, 20/s) next to a lost
 * claim, which costs an SSM write from a bucket of 3 a second.
 */
export class Candidates {
  private lists: Map<string, string[]>;
  private latest: Observation;
  private readonly handedOut = new Set<string>();
  private started = 0;
  /** A pick needs an observation numbered above this (set by a lost claim). */
  private lostMark = -1;
  private inFlight: { seq: number; at: Date; result: Promise<Observation> } | undefined;
  private refreshes = 0;
  /** How long the last observation took to answer. */
  private observeMs = 0;

  constructor(
    initial: ReadonlyMap<string, readonly string[]>,
    observedAt: Date,
    /** A fresh observation: the parked instances per pool, in this invocation's order. */
    private readonly observe?: () => Promise<ReadonlyMap<string, readonly string[]>>,
    private readonly now: () => Date = () => new Date(),
    private readonly freshMs = WARM_DEFAULTS.freshSnapshotMs,
    private readonly maxRefreshes = 10,
  ) {
    this.lists = new Map([...initial].map(([pool, ids]) => [pool, [...ids]]));
    this.latest = { seq: 0, at: observedAt };
  }

  /**
   * The next candidate of the first of `buckets` (decide.ts `bucketsFor`; a pool's name for
   * its fresh instances) that has one. `fresh`: only from an observation started after this
   * call, past `maxRefreshes` too (a lane that would otherwise give up on the warm path).
   */
  async next(buckets: string | readonly string[], options: { fresh?: boolean } = {}): Promise<{ instanceId: string; observedAt: Date; bucket: string } | undefined> {
    if (this.observe) {
      // A pick wants a list no older than `freshMs`, or, while an observation takes longer
      // than half of that, than two observations: re-observing more often cannot make the
      // picks fresher, only the requests more (their claims are verified instead).
      const maxAgeMs = Math.max(this.freshMs, 2 * this.observeMs);
      const after = options.fresh ? this.started : undefined;
      const fits = (o: { seq: number; at: Date }) =>
        after !== undefined ? o.seq > after : o.seq > this.lostMark && this.now().getTime() - o.at.getTime() <= maxAgeMs;
      try {
        await this.observation(fits, () => options.fresh === true || this.refreshes++ < this.maxRefreshes);
      } catch {
        // Keep the old list: it is still a list of candidates, and each claim is still atomic.
      }
    }
    for (const bucket of typeof buckets === 'string' ? [buckets] : buckets) {
      const list = this.lists.get(bucket) ?? [];
      for (let id = list.shift(); id !== undefined; id = list.shift()) {
        if (!this.handedOut.has(id)) {
          this.handedOut.add(id);
          return { instanceId: id, observedAt: this.latest.at, bucket };
        }
      }
    }
    return undefined;
  }

  /** After a lost claim: the next pick waits for an observation that starts from now on. */
  lost(): void {
    this.lostMark = this.started;
  }

  /**
   * The latest observation if it is `good`, else the one in flight if it is, else a new one
   * started (when `mayStart` allows) once the one in flight has ended; undefined when none
   * may start. Throws when the observation it waits for fails.
   */
  private async observation(good: (o: { seq: number; at: Date }) => boolean, mayStart: () => boolean): Promise<Observation | undefined> {
    for (;;) {
      if (good(this.latest)) return this.latest;
      const flying = this.inFlight;
      if (flying === undefined) return mayStart() ? this.start() : undefined;
      if (good(flying)) return flying.result;
      await flying.result.catch(() => undefined);
    }
  }

  private start(): Promise<Observation> {
    const seq = ++this.started;
    const at = this.now();
    const result = (async () => {
      const fresh = await this.observe!();
      this.observeMs = this.now().getTime() - at.getTime();
      const o: Observation = { seq, at };
      this.latest = o;
      this.lists = new Map([...fresh].map(([pool, ids]) => [pool, ids.filter((id) => !this.handedOut.has(id))]));
      return o;
    })();
    const entry = { seq, at, result };
    this.inFlight = entry;
    const clear = () => {
      if (this.inFlight === entry) this.inFlight = undefined;
    };
    result.then(clear, clear);
    return result;
  }
}

/**
 * Looks at claimed instances by id, for the claims that need verifying: one DescribeInstances
 * for every instance asked about while none was in flight (an instance asked about while one
 * is in flight waits for the next, which then starts after its claim's answer).
 */
export class ClaimCheck {
  private waiting = new Map<string, { resolve: (i: ObservedInstance | undefined) => void; reject: (e: unknown) => void }[]>();
  private flying = false;

  constructor(private readonly describe: (instanceIds: string[]) => Promise<readonly ObservedInstance[]>) {}

  /** The instance as a DescribeInstances started after this call sees it; undefined when it is gone. */
  see(instanceId: string): Promise<ObservedInstance | undefined> {
    return new Promise((resolve, reject) => {
      this.waiting.set(instanceId, [...(this.waiting.get(instanceId) ?? []), { resolve, reject }]);
      if (!this.flying) void this.flush();
    });
  }

  private async flush(): Promise<void> {
    const batch = this.waiting;
    this.waiting = new Map();
    this.flying = true;
    try {
      const seen = new Map((await this.describe([...batch.keys()])).map((i) => [i.id, i]));
      for (const [id, waiters] of batch) for (const w of waiters) w.resolve(seen.get(id));
    } catch (error) {
      for (const waiters of batch.values()) for (const w of waiters) w.reject(error);
    } finally {
      this.flying = false;
      if (this.waiting.size > 0) void this.flush();
    }
  }
}

/**
 * A claimed instance still carries the affinity and use count the attempt's config names
 * (none for a fresh pick): between our observation and our claim it may have served a job
 * and parked again, with an affinity of its own. Its boot would refuse our config (R1, R4);
 * the verification finds it first, as a lost claim.
 */
function sameReuseState(ctx: StepContext, a: Attempt, i: ObservedInstance): boolean {
  const affinity = i.tags.get(ctx.keys.affinity);
  if (a.reuse === undefined || a.hit !== true) return affinity === undefined;
  return affinity === a.reuse.affinity && usesOf(i, ctx.keys) === a.reuse.uses;
}

/** A claimed instance must still be a stopped, unactivated warm standby, as a check after the claim's answer sees it; never throws. */
async function verify(ctx: StepContext, a: Attempt, check: ClaimCheck): Promise<'parked' | 'stale-observation' | 'verify-error'> {
  let i: ObservedInstance | undefined;
  try {
    i = await check.see(a.instanceId);
  } catch (error) {
    a.j.log.error('verifying the claim failed', { instanceId: a.instanceId, error: errorName(error) });
    return 'verify-error';
  }
  if (i !== undefined && i.state === 'stopped' && i.tags.get(ctx.keys.warmStandby) === WARM_STANDBY_VALUE && !isActivated(i, ctx.keys) && sameReuseState(ctx, a, i)) return 'parked';
  a.j.log.warn('claimed instance is no longer a parked standby: claim lost', { instanceId: a.instanceId, state: i?.state ?? 'gone' });
  return 'stale-observation';
}
