import { errorName, mapLimit, withTimeout, WRITE_IDEMPOTENT, WRITE_ONCE } from '../shared/aws-call';
import {
  JOB_MESSAGE_SCHEMA_VERSION,
  Provider,
  runnerName,
  scaleSetJobId,
  type CiProvider,
  type FleetConfig,
  type JobMessage,
  type PoolConfig,
  type RunnerRegistration,
  type ScaleSetApi,
  type ScaleSetDemand,
  type ScaleSetDemandResult,
  type ScaleSetStartedRunner,
} from '../shared/contract';
import { ALL_STATES, describeFleet, type ObservedInstance } from '../shared/instances';
import { type LaunchTickets, type Ticket } from '../shared/launch-tickets';
import { scaleSetRunnerId } from '../ci/scale-set-runners';
import { activateWarm, Candidates, type Carried, type WarmOptions } from './activate';
import { dropCarried, launchCold } from './cold';
import { coldGates, releaseTicket, settleTicket, ticketCold } from './cold-gate';
import type { JobInFlight, StepContext } from './context';
import { gateCold, orderCandidates, parkedByBucket } from './decide';
import { scaleSetObserved, scaleSetShortfall } from './scale-set-demand';

/**
 * The most units of a shortfall one demand serves: as many as one queue invocation takes at most
 * (a FIFO queue's batch maximum, the bound of `scaleUpBatchSize`), so a demand's activations and
 * launches fit scale-up's timeout as a batch's do. The rest is answered `unserved`, and the
 * listener sends the next demand at once (poll.ts).
 */
export const SCALE_SET_SLOTS_PER_DEMAND = 10;

/** Bound on one JIT config the scale set generates (`scaleSetProvider`), as on a REST registration (`ciTimeoutMs`). */
export const JIT_CONFIG_TIMEOUT_MS = 10_000;

/**
 * No slot starts with less than this left of scale-up's invocation (its timeout is
 * `SCALE_UP_TIMEOUT_SECONDS`, 60 s), so a slot started completes or rolls back before the
 * timeout cuts it off half-done: one slot at each step's one-attempt bound, then its rollback.
 * A cold slot: the JIT config (`ciTimeoutMs`), CreateFleet (`WRITE_ONCE`), the config's
 * PutParameter and the runner-id tag (`WRITE_IDEMPOTENT` each); its rollback: the runner
 * deregistered (`ciTimeoutMs`), the instance terminated and the config deleted. 48 s with the
 * defaults. A warm slot (JIT config, claim, tag, the batch's StartInstances; rollback: config,
 * tags, runner) is within the same bound. Most slots start at once (every warm lane, the first
 * `coldConcurrency` launches): what it stops is a later wave of cold launches, or a lane moving
 * on after a lost claim, on an invocation already slow.
 */
export function scaleSetSlotReserveMs(ciTimeoutMs: number): number {
  const slot = Math.max(ciTimeoutMs, JIT_CONFIG_TIMEOUT_MS) + WRITE_ONCE.timeoutMs + 2 * WRITE_IDEMPOTENT.timeoutMs;
  const rollback = ciTimeoutMs + 2 * WRITE_IDEMPOTENT.timeoutMs;
  return slot + rollback;
}

export interface ScaleSetServeDeps {
  /** The scale-set client of the pool's scope: the JIT configs. */
  readonly api: ScaleSetApi;
  /** The fleet's GitHub provider: a scale set's runner is deregistered through the REST API like any other. */
  readonly github: CiProvider;
  readonly launchTickets?: LaunchTickets;
  readonly warm: WarmOptions;
  readonly coldConcurrency: number;
  /** The invocation id: the salt of the candidate order. */
  readonly salt: string;
  /** The most units served in this demand (`SCALE_SET_SLOTS_PER_DEMAND`). */
  readonly slots: number;
  /**
   * Whether less than `scaleSetSlotReserveMs` is left of the invocation: no slot starts past
   * it, and what is not started is answered `unserved` (absent: no budget, as in a test).
   */
  readonly outOfTime?: () => boolean;
}

/**
 * Scale-up's answer to a `ScaleSetDemand` (docs/scale-set.md, "Capacity"): observe the pool's
 * instances, compute the shortfall (scale-set-demand.ts, pure), and serve it through the
 * paths every job takes: warm activations first (the parked instances; the claim writes a
 * config whose JIT config the scale set generated), cold launches for the rest, behind the
 * prime back-off and its launch tickets. Each unit of the shortfall is a job of its own to
 * those paths (`slotJob`), with no per-job record and no queue message: nothing is kept
 * between demands, each recomputes from what is observed, so a demand repeated, lost or
 * crashed half-way starts no runner twice for one assigned job. A failed activation rolls back
 * as every activation does (the config parameter deleted, the runner deregistered); what is
 * left unserved is the next demand's.
 */
export async function serveScaleSetDemand(step: StepContext, deps: ScaleSetServeDeps, demand: ScaleSetDemand): Promise<ScaleSetDemandResult> {
  const pool = step.config.pools.find((p) => p.name === demand.pool);
  if (!pool?.scaleSet) throw new Error(`pool "${demand.pool}" is not a scale-set pool of this fleet`);
  const log = step.log.child({ pool: pool.name, traceId: demand.traceId, scaleSetId: demand.scaleSetId });
  const observedAt = step.now();
  const instances = await describeFleet(step.aws, step.ec2, step.keys, { pool: pool.name });
  // The runners earlier demands started count even where this observation lags behind them;
  // those it omits are looked up in every state, so one that already ended holds no job's place.
  const ended = await endedOf(step, log, pool.name, instances, demand.recentlyStarted);
  const observed = scaleSetObserved([...instances, ...ended], pool.name, step.keys, demand.recentlyStarted, observedAt);
  const wanted = scaleSetShortfall(demand.assignedJobs, observed, pool);
  if (wanted === 0) return { observed: observed.runners, started: 0, unserved: 0, startedRunners: [] };
  const shortfall = Math.min(wanted, deps.slots);
  if (shortfall < wanted) log.info('the shortfall is served in parts: the rest goes to the next demand', { wanted, slots: shortfall });

  const provider = scaleSetProvider(step.config, pool, deps.api, demand.scaleSetId, deps.github, step.now);
  const jobs = Array.from({ length: shortfall }, (_, slot) => slotJob(demand, pool, provider, slot, log, step.now()));
  const parked = orderCandidates(parkedByBucket(instances, step.keys), deps.salt);
  const warmCount = Math.min(shortfall, parked.get(pool.name)?.length ?? 0);
  const startedRunners: ScaleSetStartedRunner[] = [];
  const outOfTime = deps.outOfTime ?? (() => false);
  const cold = jobs.slice(warmCount);
  const carried = new Map<string, Carried>();
  if (warmCount > 0) {
    const observe = async () => parkedByBucket(await describeFleet(step.aws, step.ec2, step.keys, { pool: pool.name, states: ['stopped'] }), step.keys);
    const candidates = new Candidates(parked, observedAt, observe, step.now, deps.warm.freshSnapshotMs);
    const outcomes = await activateWarm(step, jobs.slice(0, warmCount), candidates, deps.warm, undefined, outOfTime);
    for (const j of jobs.slice(0, warmCount)) {
      const o = outcomes.get(j.key)!;
      if (o.kind === 'started') {
        startedRunners.push({ instanceId: o.instanceId, startedAt: step.now().toISOString() });
        j.log.info('warm activation started the instance', { instanceId: o.instanceId, runnerId: o.runnerId });
        step.metrics.add(step.config.metrics.names.activations, { Pool: pool.name });
      } else if (o.reason === 'out-of-time') {
        // No fallback: the cold launch is not started either (`launch`); the registration a refused claim left goes with it.
        cold.push(j);
        if (o.carried) carried.set(j.key, o.carried);
      } else {
        j.log.warn('warm activation fell back to a cold launch', { reason: o.reason });
        step.metrics.add(step.config.metrics.names.fallbacks, { Pool: pool.name, Reason: o.reason });
        cold.push(j);
        if (o.carried) carried.set(j.key, o.carried);
      }
    }
  }
  startedRunners.push(...(await launch(step, deps, cold, instances, carried, outOfTime)));
  if (startedRunners.length < shortfall && outOfTime()) log.warn('too little time left for another slot: the rest goes to the next demand', { wanted, started: startedRunners.length });
  return { observed: observed.runners, started: startedRunners.length, unserved: wanted - startedRunners.length, startedRunners };
}

/**
 * The recently started runners the live observation omits, looked up by id in every state: an
 * ephemeral runner whose job completed within `SCALE_SET_RECENT_START_MS` has terminated, and
 * the live observation (no terminated instances) cannot tell it from one EC2's reads do not show
 * yet. Seen gone, it counts for nothing (scale-set-demand.ts); still unseen, it counts. A failed
 * lookup leaves them all unseen (they count, as before the lookup existed), rather than failing
 * the demand: the listener would hold the lease for scale-up's whole bound over it.
 */
async function endedOf(step: StepContext, log: StepContext['log'], pool: string, live: readonly ObservedInstance[], recentlyStarted: readonly ScaleSetStartedRunner[] = []): Promise<ObservedInstance[]> {
  const seen = new Set(live.map((i) => i.id));
  const missing = [...new Set(recentlyStarted.map((r) => r.instanceId))].filter((id) => !seen.has(id));
  if (missing.length === 0) return [];
  try {
    const found = await describeFleet(step.aws, step.ec2, step.keys, { pool, states: ALL_STATES, instanceIds: missing });
    return found.filter((i) => !seen.has(i.id));
  } catch (error) {
    log.warn('looking up the recently started runners the observation omits failed: they count as runners', { missing: missing.length, error: errorName(error) });
    return [];
  }
}

/**
 * The cold launches the prime back-off, its tickets and the time left let through (the runners
 * they started); the rest is left for the next demand. A launch not started for lack of time
 * gives its ticket back and deletes the registration it carried: nothing of it is left.
 */
async function launch(
  step: StepContext,
  deps: ScaleSetServeDeps,
  cold: readonly JobInFlight[],
  instances: Parameters<typeof coldGates>[2],
  carried: ReadonlyMap<string, Carried>,
  outOfTime: () => boolean,
): Promise<ScaleSetStartedRunner[]> {
  if (cold.length === 0) return [];
  if (outOfTime()) {
    await dropCarried(step, cold, carried, deps.coldConcurrency);
    return [];
  }
  let launching: JobInFlight[] = [];
  let granted = new Map<string, Ticket>();
  try {
    const gates = await coldGates(step, cold, instances);
    const now = step.now();
    // No job waits here (the next demand asks again): no maximum wait applies.
    const verdicts = gateCold(cold.map((j) => ({ key: j.key, pool: j.pool.name, receivedAt: now.toISOString() })), gates, now, Number.MAX_SAFE_INTEGER);
    launching = cold.filter((j) => verdicts.get(j.key)!.kind === 'cold');
    if (deps.launchTickets && launching.length > 0) {
      const t = await ticketCold(step, deps.launchTickets, gates, launching, () => false);
      granted = t.granted;
      launching = launching.filter((j) => !t.refused.includes(j));
    }
  } finally {
    // A registration carried from a refused claim goes with its launch; one that does not launch deletes it.
    await dropCarried(step, cold.filter((j) => !launching.includes(j)), carried, deps.coldConcurrency);
  }
  const started: ScaleSetStartedRunner[] = [];
  await mapLimit(launching, deps.coldConcurrency, async (j) => {
    if (outOfTime()) {
      j.log.info('too little time left to start the cold launch: the next demand asks again');
      const ticket = granted.get(j.key);
      if (ticket && deps.launchTickets) await releaseTicket(deps.launchTickets, j, ticket);
      await dropCarried(step, [j], carried, 1);
      return;
    }
    try {
      // One receive per demand: the launch token names the slot of this reading, so a CreateFleet
      // resent within the demand returns the same fleet.
      const r = await launchCold(step, j, { messageId: j.key, receiveCount: 1 }, carried.get(j.key));
      started.push({ instanceId: r.instanceId, startedAt: step.now().toISOString() });
      j.log.info('cold launch started an instance', { instanceId: r.instanceId, runnerId: r.runnerId, capacityType: r.capacityType });
      step.metrics.add(step.config.metrics.names.coldLaunches, { Pool: j.pool.name });
    } catch (error) {
      j.log.error('cold launch failed; the next demand asks again', { error: (error as Error).message });
      step.metrics.add(step.config.metrics.names.jobsFailed, { Pool: j.pool.name, Reason: `cold-${(error as { step?: string }).step ?? 'launch'}` });
      const ticket = granted.get(j.key);
      if (ticket && deps.launchTickets) await settleTicket(deps.launchTickets, j, ticket, error);
    }
  });
  return started;
}

/** One unit of the shortfall as the warm and cold paths take a job: the demand's reading and a slot of it. */
function slotJob(demand: ScaleSetDemand, pool: PoolConfig, provider: CiProvider, slot: number, log: StepContext['log'], now: Date): JobInFlight {
  const jobId = scaleSetJobId(demand.scaleSetId, demand.traceId, slot);
  const job: JobMessage = {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITHUB,
    jobId,
    providerJobId: jobId.slice(`${Provider.GITHUB}:`.length),
    pool: pool.name,
    owner: '',
    project: '',
    labels: [...pool.labels],
    labelsResolved: true,
    traceId: demand.traceId,
    deliveryId: demand.traceId,
    receivedAt: now.toISOString(),
  };
  return { key: `${demand.traceId}#${slot}`, job, pool, provider, log: log.child({ slot, jobId }) };
}

/**
 * The CI provider the warm and cold paths register a scale set's runner with: a JIT config
 * the scale set generates (`ScaleSetApi.generateJitConfig`) instead of the REST
 * `generate-jitconfig`, named as every runner of the fleet is (`runnerName`: the sweep finds
 * it); its id spelled as the REST runner list spells it (`scaleSetRunnerId`). Deregistering,
 * listing and the rest go to the fleet's GitHub provider: the runner is a runner of the scale
 * set's organisation or repository, which the REST API deletes like any other.
 */
export function scaleSetProvider(config: FleetConfig, pool: PoolConfig, api: ScaleSetApi, scaleSetId: number, github: CiProvider, now: () => Date, timeoutMs = JIT_CONFIG_TIMEOUT_MS): CiProvider {
  const connection = config.github;
  if (!connection) throw new Error('the fleet has no GitHub connection');
  return {
    provider: Provider.GITHUB,
    async createRunner(_job, instanceId): Promise<RunnerRegistration> {
      const name = runnerName(config.prefix, instanceId, now());
      const jit = await withTimeout('generateJitConfig', timeoutMs, () => api.generateJitConfig(scaleSetId, name));
      return { runnerId: scaleSetRunnerId(connection, pool, jit.runnerId), name, secret: jit.encodedJitConfig };
    },
    deleteRunner: (runnerId) => github.deleteRunner(runnerId),
    listRunners: (options) => github.listRunners(options),
    // No job of its own: the runner takes whichever assigned job GitHub gives it.
    isJobQueued: () => Promise.resolve(true),
  };
}
