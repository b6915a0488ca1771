import {
  activationTimeOfRunnerName,
  FLEET_DEFAULTS,
  type FleetConfig,
  parseParking,
  REUSE_DEFAULTS,
  runnerIdKey,
  type PoolConfig,
  type Provider,
  type RunnerSummary,
  type TagKeys,
} from '../shared/contract';
import { isActivated, type ObservedInstance } from '../shared/instances';
import { activationTime, jobReported, maxJobSecondsOf, reportedStart } from '../shared/job-report';
import { IDLE_STOP_LEFTOVER_MS, type ObservedParameter } from '../shared/parameters';

/**
 * Why scale-down acts; each is logged and counted.
 * - job-finished: the instance's runner is gone at the provider (an ephemeral runner is
 *   removed after its one job; when the instance reported its job started within the max job
 *   duration, gone at two readings a window apart, see `unlistedReading`) or the activated
 *   instance powered off.
 * - idle: the runner has sat idle (not busy) past the pool's idle timeout since activation,
 *   read so by two sweeps at least the pool's idle confirmation apart, and its instance has not
 *   reported that its job started within the pool's max job duration (see `idleReading`).
 *   In a reusable pool an idle runner whose activation reported no job is not terminated but
 *   idle-stopped (`idleStop`, lambdas/scale-down/idle-stop.ts): deregistered, so that its
 *   instance cleans itself and parks with its caches.
 * - no-runner: activated without a runner id after the grace period (an activation that
 *   died half-way).
 * - instance-gone: a config parameter whose instance no longer exists.
 * - stale-claim: a config parameter on an unactivated, stopped instance, older than the
 *   grace period (a claim whose invocation died before tagging and starting).
 * - leftover-marker: an idle-stop marker older than IDLE_STOP_LEFTOVER_MS (its sweep died).
 * - instance-terminated: the config parameter of an instance this run terminated, deleted
 *   in the same run (it holds a runner secret).
 * - no-instance: a registration at the provider that no live instance carries (by its
 *   runner-id tag) past the grace period from its name's time (a failed activation whose
 *   deregistration failed, or a runner whose instance is gone).
 */
export type SweepReason = 'job-finished' | 'idle' | 'no-runner' | 'instance-gone' | 'stale-claim' | 'leftover-marker' | 'instance-terminated' | 'no-instance';

export interface Terminate {
  readonly instance: ObservedInstance;
  readonly reason: 'job-finished' | 'idle' | 'no-runner';
  /** The runner to deregister with it, when the provider still lists it. */
  readonly runner?: { readonly provider: Provider; readonly runnerId: string };
}
export interface DeleteParameter {
  readonly parameter: ObservedParameter;
  readonly reason: 'instance-gone' | 'stale-claim' | 'leftover-marker';
}
/** An idle runner of a reusable pool: deregister it under an idle-stop claim, and let its instance park. */
export interface IdleStop {
  readonly instance: ObservedInstance;
  readonly runner: { readonly provider: Provider; readonly runnerId: string };
}
export interface DeleteRunner {
  readonly provider: Provider;
  readonly runner: RunnerSummary;
  readonly reason: 'no-instance';
}

export interface SweepPlan {
  readonly terminate: readonly Terminate[];
  readonly deleteParameters: readonly DeleteParameter[];
  readonly deleteRunners: readonly DeleteRunner[];
  /** Runners read idle past the idle timeout for the first time: tag `idleSince` = now. */
  readonly markIdle: readonly ObservedInstance[];
  /** Runners read working again (or whose instance reported its job): remove `idleSince`. */
  readonly clearIdle: readonly ObservedInstance[];
  /** Idle runners of reusable pools whose activation reported no job: idle-stop, not terminate. */
  readonly idleStop: readonly IdleStop[];
}

export interface SweepOptions {
  /** Time an activation has to get its runner registered and online (seconds). */
  readonly graceSeconds: number;
}

export const SWEEP_DEFAULTS: SweepOptions = { graceSeconds: 10 * 60 };

/**
 * What one sweep's reading says about a listed runner of a running, activated instance:
 * - working: not idle (busy, or online where the provider gives no busy flag), or idle within
 *   the idle timeout, or its instance reported that its job started within the pool's max job
 *   duration (the instance knows; the provider's reading may be stale or wrong, as GitHub's
 *   `busy: false` mid-job was);
 * - first: idle past the idle timeout, with no earlier idle reading of this activation;
 * - waiting: idle again, but the first idle reading is less than the confirmation window old;
 * - confirmed: idle again at least the window after the first idle reading, with no working
 *   reading between them (a working reading clears the first one).
 */
export type IdleReading = 'working' | 'first' | 'waiting' | 'confirmed';

export function idleReading(
  instance: ObservedInstance,
  keys: TagKeys,
  runner: RunnerSummary,
  activatedAt: number,
  age: number,
  pool: PoolConfig,
  now: Date,
): IdleReading {
  // Where the provider gives no busy flag, "not online" is the idle reading.
  const idle = runner.busy === false || (runner.busy === undefined && runner.status !== 'online');
  if (!idle || age <= pool.idleTimeoutSeconds * 1000 || jobReported(instance, keys, activatedAt, maxJobSecondsOf(pool), now)) return 'working';
  return repeatedReading(instance, keys, activatedAt, pool, now);
}

/**
 * What one sweep's reading says of a runner missing from a complete list: an ephemeral
 * runner is removed after its one job, so its job finished ('confirmed' at once), unless
 * its instance reported that its job started within the pool's max job duration. Then one
 * list read could be wrong (a runner missing from one answer, as GitHub was seen to read
 * `busy: false` mid-job), and the two readings a window apart decide, as for an idle runner:
 * a runner that finished for good is still missing at the second reading.
 */
export function unlistedReading(instance: ObservedInstance, keys: TagKeys, activatedAt: number, pool: PoolConfig, now: Date): Exclude<IdleReading, 'working'> {
  const maxJobSeconds = maxJobSecondsOf(pool);
  if (!jobReported(instance, keys, activatedAt, maxJobSeconds, now)) return 'confirmed';
  // An idle mark from before the job started read the idle runner, not this one: a sweep that
  // marked it idle, the job starting, then one unlisted reading must not end the job. Only
  // within the max job duration from the activation: the job can rewrite its report, and a
  // process that outlived it must not re-mark the instance forever.
  const started = now.getTime() - activatedAt < maxJobSeconds * 1000 ? reportedStart(instance, keys, activatedAt, now) : undefined;
  return repeatedReading(instance, keys, started ?? activatedAt, pool, now);
}

/** A reading that would end the instance: the first marks it, one a window later confirms. */
function repeatedReading(instance: ObservedInstance, keys: TagKeys, notBefore: number, pool: PoolConfig, now: Date): Exclude<IdleReading, 'working'> {
  const since = Date.parse(instance.tags.get(keys.idleSince) ?? '');
  // A mark from before this activation (or before the reported job start, or unreadable) is no reading of this runner.
  if (!Number.isFinite(since) || since < notBefore) return 'first';
  const window = (pool.idleConfirmSeconds ?? FLEET_DEFAULTS.idleConfirmSeconds) * 1000;
  return now.getTime() - since >= window ? 'confirmed' : 'waiting';
}

/**
 * Whether the instance is cleaning itself to park after this activation's runner ended: its
 * `parking` tag names this activation (one of another is stale, R3) and its since is within
 * REUSE_DEFAULTS.parkSeconds of now (either side: a clock ahead must not keep it for ever).
 * After that the sweep's rules apply again: an instance that did not park in time is reclaimed.
 */
export function parkingNow(instance: ObservedInstance, keys: TagKeys, now: Date): boolean {
  const parking = parseParking(instance.tags.get(keys.parking));
  if (!parking || parking.activatedAt !== instance.tags.get(keys.activatedAt)) return false;
  const window = REUSE_DEFAULTS.parkSeconds * 1000;
  const since = parking.since.getTime();
  return now.getTime() - since < window && since - now.getTime() < window;
}

/** Whether the instance carries a parking tag naming its current activation, in its window or past it. */
export function parkingOfThisActivation(instance: ObservedInstance, keys: TagKeys): boolean {
  const parking = parseParking(instance.tags.get(keys.parking));
  return parking !== undefined && parking.activatedAt === instance.tags.get(keys.activatedAt);
}

const LIVE = new Set(['pending', 'running', 'stopping', 'stopped']);

/**
 * The sweep's plan, from what is observed now: the fleet's instances (all states), the
 * config parameters, and the runners of each provider whose list could be read (a
 * provider missing from `runners` is unknown, never empty: nothing is decided from it; a
 * provider in `partial` listed only some runners: nothing is decided from a runner's absence).
 * Nothing is terminated while it may be working: a busy runner keeps its instance, and
 * every rule waits out the grace period from the activation.
 */
export function planSweep(
  config: FleetConfig,
  keys: TagKeys,
  instances: readonly ObservedInstance[],
  parameters: readonly ObservedParameter[],
  runners: ReadonlyMap<Provider, readonly RunnerSummary[]>,
  now: Date,
  options: SweepOptions = SWEEP_DEFAULTS,
  partial: ReadonlySet<Provider> = new Set(),
): SweepPlan {
  const live = new Map(instances.filter((i) => LIVE.has(i.state)).map((i) => [i.id, i]));
  const grace = options.graceSeconds * 1000;
  const runnerById = new Map<string, { provider: Provider; runner: RunnerSummary }>();
  for (const [provider, list] of runners) for (const r of list) runnerById.set(`${provider}:${runnerIdKey(r.runnerId)}`, { provider, runner: r });

  const terminate: Terminate[] = [];
  const markIdle: ObservedInstance[] = [];
  const clearIdle: ObservedInstance[] = [];
  const idleStop: IdleStop[] = [];
  for (const i of live.values()) {
    if (!isActivated(i, keys)) continue;
    const pool = config.pools.find((p) => p.name === i.tags.get(keys.pool));
    if (!pool) continue;
    const activatedAt = activationTime(i, keys);
    const age = now.getTime() - activatedAt;
    if (age < grace || parkingNow(i, keys, now)) continue;
    const runnerId = i.tags.get(keys.runnerId);
    if (runnerId === undefined) {
      terminate.push({ instance: i, reason: 'no-runner' });
      continue;
    }
    const listed = runners.has(pool.provider) ? runnerById.get(`${pool.provider}:${runnerIdKey(runnerId)}`) : undefined;
    const withRunner = listed ? { runner: { provider: pool.provider, runnerId } } : {};
    if (listed?.runner.busy === true) {
      if (i.tags.has(keys.idleSince)) clearIdle.push(i);
      continue;
    }
    if (i.state === 'stopped') {
      terminate.push({ instance: i, reason: 'job-finished', ...withRunner });
      continue;
    }
    if (!runners.has(pool.provider)) continue;
    // A list cut at the provider's page cap says nothing about the runners it lacks.
    if (!listed && partial.has(pool.provider)) continue;
    const reading = listed ? idleReading(i, keys, listed.runner, activatedAt, age, pool, now) : unlistedReading(i, keys, activatedAt, pool, now);
    if (reading === 'working' && i.tags.has(keys.idleSince)) clearIdle.push(i);
    else if (reading === 'first') markIdle.push(i);
    // One idle-stop per activation: a parking tag of this activation whose window passed means an
    // earlier idle-stop's deregistration failed or the instance never parked: terminate as today.
    else if (reading === 'confirmed' && listed && pool.reuse && i.tags.has(keys.activatedAt) && reportedStart(i, keys, activatedAt, now) === undefined && !parkingOfThisActivation(i, keys)) {
      idleStop.push({ instance: i, runner: { provider: pool.provider, runnerId } });
    } else if (reading === 'confirmed') terminate.push({ instance: i, reason: listed ? 'idle' : 'job-finished', ...withRunner });
  }

  const deleteParameters: DeleteParameter[] = [];
  for (const p of parameters) {
    const age = now.getTime() - p.lastModified.getTime();
    const i = live.get(p.instanceId);
    // A cold launch writes the parameter right after CreateFleet: give describe a minute.
    if (p.idleStopMarker) {
      if (age > IDLE_STOP_LEFTOVER_MS) deleteParameters.push({ parameter: p, reason: 'leftover-marker' });
    } else if (!i) {
      if (age > 60_000) deleteParameters.push({ parameter: p, reason: 'instance-gone' });
    } else if (!isActivated(i, keys) && i.state === 'stopped' && age > grace) {
      deleteParameters.push({ parameter: p, reason: 'stale-claim' });
    }
  }

  const deleteRunners = orphanRunners(config, keys, live, runners, now, grace);
  return { terminate, deleteParameters, deleteRunners, markIdle, clearIdle, idleStop };
}

/**
 * Registrations no live instance carries, past the grace period from their name's time.
 * A runner's instance is the live instance tagged with its id (of a pool of its provider).
 * Its name names the instance it was registered for, which is not always the one that runs
 * it: scale-up carries a registration past a refused claim to the job's next candidate or
 * its cold launch (scale-up/activate.ts `Carried`). An instance whose pool the config no
 * longer names (renamed or removed while it works) keeps its id for every provider: its
 * provider is unknown, and its runner may be mid-job (the instance rules leave it alone too).
 */
function orphanRunners(
  config: FleetConfig,
  keys: TagKeys,
  live: ReadonlyMap<string, ObservedInstance>,
  runners: ReadonlyMap<Provider, readonly RunnerSummary[]>,
  now: Date,
  grace: number,
): DeleteRunner[] {
  const carriers = new Set<string>();
  for (const i of live.values()) {
    const pool = config.pools.find((p) => p.name === i.tags.get(keys.pool));
    const runnerId = i.tags.get(keys.runnerId);
    if (runnerId === undefined) continue;
    for (const provider of pool ? [pool.provider] : runners.keys()) carriers.add(`${provider}:${runnerIdKey(runnerId)}`);
  }
  const deleteRunners: DeleteRunner[] = [];
  for (const [provider, list] of runners) {
    for (const runner of list) {
      if (runner.busy === true) continue;
      // Undefined for a name this fleet did not make: not ours to delete.
      const at = activationTimeOfRunnerName(config.prefix, runner.name);
      if (at === undefined || now.getTime() - at.getTime() < grace) continue;
      if (!carriers.has(`${provider}:${runnerIdKey(runner.runnerId)}`)) deleteRunners.push({ provider, runner, reason: 'no-instance' });
    }
  }
  return deleteRunners;
}
