import { AFFINITY_PATTERN, parseParking, REUSE_DEFAULTS, WARM_STANDBY_VALUE, type PoolConfig, type TagKeys } from '../shared/contract';
import { isActivated, templateVersionOf, type ObservedInstance } from '../shared/instances';

/**
 * What a pool instance is, from observed state only (DESIGN invariant 4).
 *
 * - active: activated by scale-up or launched cold for a job; the pool never touches it.
 * - claimed: a warm standby whose config parameter exists (a scale-up invocation owns it
 *   between its claim and its tags, or an eviction or idle-stop marker holds it); the pool
 *   never touches it either.
 * - priming: a warm standby, not activated, pending/running/stopping (first boot, preparing).
 * - parking: a reusable instance that served a job and is on its way back to the pool: not
 *   activated any more (it removed its activation tags itself), carrying its `affinity`, not
 *   stopped yet (contract reuse.ts, step 4). It holds a place like a priming standby.
 * - parked: a warm standby, not activated, stopped by a client-initiated shutdown; with an
 *   `affinity` tag it is a reused one, carrying its caches.
 * - garbage: any other warm standby, e.g. stopped with a `Server.*` reason (a spot
 *   interruption, an internal error) or with no reason at all, or one whose reuse tags do not
 *   parse (an affinity no job of the pool can have, a use count that is not a number). A
 *   `parking` tag on an instance that is not activated names an activation that is over: it
 *   is ignored (R3), only its time bounds a parking instance (`evictionReason`).
 * - gone: shutting-down or terminated; counts for nothing.
 *
 * Parked accepts both client-initiated codes through one branch: EC2 reports the priming
 * boot's own power-off as `Client.InstanceInitiatedShutdown`, moto reports every stop as
 * `Client.UserInitiatedShutdown` (so do EC2 console/API stops). The code path the moto tests
 * run is the one that runs on EC2; the EC2 signal the design relies on is
 * `Client.InstanceInitiatedShutdown` (see docs/control-plane.md). A reused instance parks by
 * the same power-off, so the same signal.
 */
export type InstanceClass = 'active' | 'claimed' | 'priming' | 'parking' | 'parked' | 'garbage' | 'gone' | 'foreign';

export const PARKED_STATE_REASONS: ReadonlySet<string> = new Set(['Client.InstanceInitiatedShutdown', 'Client.UserInitiatedShutdown']);

export function classify(instance: ObservedInstance, keys: TagKeys, claimed: boolean): InstanceClass {
  if (instance.state === 'shutting-down' || instance.state === 'terminated') return 'gone';
  if (isActivated(instance, keys)) return 'active';
  if (instance.tags.get(keys.warmStandby) !== WARM_STANDBY_VALUE) return 'foreign';
  if (claimed) return 'claimed';
  const reuse = reuseTagsOf(instance, keys);
  if (reuse === 'malformed') return 'garbage';
  if (instance.state === 'pending' || instance.state === 'running' || instance.state === 'stopping') return reuse ? 'parking' : 'priming';
  if (instance.state === 'stopped' && instance.stateReason !== undefined && PARKED_STATE_REASONS.has(instance.stateReason)) return 'parked';
  return 'garbage';
}

/** A reused instance's tags: undefined for a fresh one (no affinity), 'malformed' when they do not parse. */
export function reuseTagsOf(instance: ObservedInstance, keys: TagKeys): { readonly affinity: string; readonly uses: number } | 'malformed' | undefined {
  const affinity = instance.tags.get(keys.affinity);
  if (affinity === undefined) return undefined;
  // No use count yet: scale-up writes the affinity when it activates; the instance writes `uses` when it parks.
  const uses = instance.tags.get(keys.uses) ?? '0';
  if (!new RegExp(AFFINITY_PATTERN).test(affinity) || !/^\d{1,6}$/.test(uses)) return 'malformed';
  return { affinity, uses: Number(uses) };
}

/**
 * When the instance was built. EC2 moves LaunchTime on every start: a fresh standby is started
 * once (its priming boot), but a reused one is started again for every job it serves, so its
 * age is read from its first launch (root volume and primary interface attach times).
 */
export function builtAt(instance: ObservedInstance, keys: TagKeys): Date {
  return instance.tags.has(keys.affinity) ? (instance.firstLaunchTime ?? instance.launchTime) : instance.launchTime;
}

/**
 * Why an instance is evicted (logged and counted as `Evictions{Reason}`):
 * - `reuse-limit`: a reused instance that served `reuse.maxJobs` jobs or is older (from its
 *   first launch) than `reuse.maxAgeSeconds` (the limits were lowered since it parked);
 * - `reuse-off`: a reused instance in a pool whose reuse was switched off: its caches belong
 *   to a scope no job of the pool is served by any more.
 */
export type EvictionReason = 'garbage' | 'max-age' | 'stale-template' | 'stale-image' | 'stale-runner' | 'priming-timeout' | 'over-target' | 'reuse-limit' | 'reuse-off';
export const EVICTION_REASONS: readonly EvictionReason[] = ['garbage', 'max-age', 'stale-template', 'stale-image', 'stale-runner', 'priming-timeout', 'over-target', 'reuse-limit', 'reuse-off'];

/**
 * Replacements of parked instances of an older runner in flight at once, per pool (`stale-runner`):
 * a few at a time, so a new release that does not prime costs at most this many parked
 * instances before the prime back-off stops the roll (the pool passes no release then).
 */
export const RUNNER_ROLL_BATCH = 2;

/** The runner release a pool that follows the newest one installs now (the resolver's parameter). */
export interface CurrentRunner {
  readonly version: string;
}

/** The image a pool's launch template resolves now: its image parameter's value and when that was written. */
export interface CurrentImage {
  readonly imageId: string;
  readonly publishedAt: Date;
}

export interface Eviction {
  readonly instance: ObservedInstance;
  readonly reason: EvictionReason;
}

export interface PoolPlan {
  readonly evictions: readonly Eviction[];
  /** Warm standbys to launch so priming + parking + parked reaches the target. */
  readonly launch: number;
  /** Parked instances that stay, fresh and reused. */
  readonly parked: number;
  /** Of `parked`, the reused ones (with an affinity): each serves only jobs of its own scope. */
  readonly parkedReused: number;
  /** Build time (`builtAt`) of each parked standby that stays (its priming boot): the prime-failure streak reads them. */
  readonly parkedLaunchTimes: Date[];
  /** Priming standbys and reused instances on their way to park: both about to be parked. */
  readonly priming: number;
  readonly target: number;
  /** Instances serving a job (activated warm or launched cold), for the dashboard. */
  readonly active: number;
}

/** True when the template version can be compared: "$Latest"/"$Default" name no number. */
function staleTemplate(instance: ObservedInstance, pool: PoolConfig): boolean {
  if (!/^\d+$/.test(pool.launchTemplateVersion)) return false;
  const version = templateVersionOf(instance);
  return version !== undefined && version !== pool.launchTemplateVersion;
}

/**
 * True when the instance was built from an image older than the current one (`built`: when it
 * was built, `builtAt`; a reused instance's LaunchTime is its last job's start). Only an instance
 * launched before the current image was published can be stale: one launched after it that
 * still shows another ImageId resolved the parameter differently (a version label, a lagging
 * read), and evicting it would relaunch the same image in a loop.
 */
export function staleImage(instance: ObservedInstance, image: CurrentImage | undefined, built: Date = instance.launchTime): boolean {
  if (image === undefined || instance.imageId === undefined) return false;
  // EC2 gives LaunchTime in whole seconds: an instance of the publication's second counts as after it.
  const publishedSecond = Math.floor(image.publishedAt.getTime() / 1000) * 1000;
  return instance.imageId !== image.imageId && built.getTime() < publishedSecond;
}

type Kept = { readonly instance: ObservedInstance; readonly cls: 'parked' | 'priming' | 'parking' };

/**
 * The pool's plan for one run: which warm standbys to evict (each with its reason) and how
 * many to launch. `claimedIds` are standbys with a config parameter; `image` is the current
 * value of the pool's image parameter, absent when it has none or it could not be read (then
 * no instance is evicted for its image). Only priming, parking, parked and garbage instances
 * are ever evicted: never a claimed or an active one.
 *
 * Age is measured from `builtAt`: LaunchTime for a fresh standby (started once, by its
 * priming boot), the first launch for a reused one. A reused instance (with an affinity) is
 * bound by its pool's reuse limits, not by `warm.maxAgeSeconds`: the boot script applies the
 * same limits when it decides to park or terminate, so the two sides agree on one bound, and
 * the warm bound (a fresh standby's freshness) would otherwise cap `reuse.maxAgeSeconds`
 * silently. Template and image rules apply to both.
 */
export function planPool(
  instances: readonly ObservedInstance[],
  claimedIds: ReadonlySet<string>,
  pool: PoolConfig,
  keys: TagKeys,
  target: number,
  now: Date,
  image?: CurrentImage,
  runner?: CurrentRunner,
): PoolPlan {
  const evictions: Eviction[] = [];
  const kept: Kept[] = [];
  const staleParked: ObservedInstance[] = [];
  let active = 0;
  const ageSeconds = (i: ObservedInstance) => (now.getTime() - builtAt(i, keys).getTime()) / 1000;
  for (const instance of instances) {
    const cls = classify(instance, keys, claimedIds.has(instance.id));
    if (cls === 'active') active++;
    if (cls === 'garbage') evictions.push({ instance, reason: 'garbage' });
    else if (cls === 'parked' || cls === 'priming' || cls === 'parking') {
      const reason = evictionReason(instance, cls, pool, keys, ageSeconds(instance), image, now);
      if (reason === 'stale-image' && cls === 'parked') staleParked.push(instance);
      else if (reason) evictions.push({ instance, reason });
      else kept.push({ instance, cls });
    }
  }
  // Parked standbys of a superseded image keep serving until one of the current image has
  // parked: a new image that does not prime must not empty a working pool. Until then they go
  // as parked standbys always go (activated, max age), and their replacements use the new image.
  if (staleParked.length > 0) {
    if (kept.some((k) => k.cls === 'parked')) for (const instance of staleParked) evictions.push({ instance, reason: 'stale-image' });
    else for (const instance of staleParked) {
      if (!instance.tags.has(keys.affinity) && ageSeconds(instance) > pool.warm.maxAgeSeconds) evictions.push({ instance, reason: 'max-age' });
      else kept.push({ instance, cls: 'parked' });
    }
  }
  const over = kept.length - target;
  if (over > 0) for (const k of overTargetOrder(kept, keys).slice(0, over)) evictions.push({ instance: k.instance, reason: 'over-target' });
  if (runner) evictions.push(...staleRunners(kept, evictions, keys, runner));
  const evicted = new Set(evictions.map((e) => e.instance.id));
  const remaining = kept.filter((k) => !evicted.has(k.instance.id));
  const parked = remaining.filter((k) => k.cls === 'parked');
  return {
    evictions,
    launch: Math.max(0, target - remaining.length),
    parked: parked.length,
    parkedReused: parked.filter((k) => k.instance.tags.has(keys.affinity)).length,
    parkedLaunchTimes: parked.map((k) => builtAt(k.instance, keys)),
    priming: remaining.length - parked.length,
    target,
    active,
  };
}

/**
 * Parked instances whose runner is not the current release, oldest first, as many as the roll
 * batch leaves room for: every instance on its way to park (priming, parking) counts as one in
 * flight, so the pool never has more than `RUNNER_ROLL_BATCH` replacements outstanding and the
 * rest keep serving jobs with the runner they have (GitHub accepts it for 30 days after the new
 * release). Only instances that name their version are replaced: one whose image carried the
 * runner installed nothing and names none. As with `stale-image`, a release not yet proven to
 * prime must not empty the pool: until a parked instance carries it, one stale parked instance
 * stays (a small pool would otherwise lose every standby to a release that never parks).
 */
function staleRunners(kept: readonly Kept[], evictions: readonly Eviction[], keys: TagKeys, runner: CurrentRunner): Eviction[] {
  const going = new Set(evictions.map((e) => e.instance.id));
  const stays = kept.filter((k) => !going.has(k.instance.id));
  const inFlight = stays.filter((k) => k.cls !== 'parked').length;
  const room = Math.max(0, RUNNER_ROLL_BATCH - inFlight);
  const stale = stays.filter((k) => {
    const version = k.instance.tags.get(keys.runnerVersion);
    return k.cls === 'parked' && version !== undefined && version !== runner.version;
  });
  const proven = stays.some((k) => k.cls === 'parked' && k.instance.tags.get(keys.runnerVersion) === runner.version);
  return [...stale]
    .sort((a, b) => builtAt(a.instance, keys).getTime() - builtAt(b.instance, keys).getTime())
    .slice(0, proven ? room : Math.min(room, stale.length - 1))
    .map((k) => ({ instance: k.instance, reason: 'stale-runner' as const }));
}

/**
 * Why one priming, parking or parked instance goes, or undefined when it stays. A reused
 * instance's reuse rules come first; an affinity of another provider is one no job of this
 * pool can have (garbage).
 */
function evictionReason(
  instance: ObservedInstance,
  cls: Kept['cls'],
  pool: PoolConfig,
  keys: TagKeys,
  age: number,
  image: CurrentImage | undefined,
  now: Date,
): EvictionReason | undefined {
  const reuse = reuseTagsOf(instance, keys);
  if (reuse !== undefined && reuse !== 'malformed') {
    if (!reuse.affinity.startsWith(`${pool.provider}:`)) return 'garbage';
    if (pool.reuse === undefined) return 'reuse-off';
    if (reuse.uses >= pool.reuse.maxJobs || age >= pool.reuse.maxAgeSeconds) return 'reuse-limit';
  }
  if (staleTemplate(instance, pool)) return 'stale-template';
  if (staleImage(instance, image, builtAt(instance, keys))) return 'stale-image';
  if (cls === 'parked' && reuse === undefined && age > pool.warm.maxAgeSeconds) return 'max-age';
  // LaunchTime: the priming boot's start.
  if (cls === 'priming' && age > pool.warm.primingTimeoutSeconds) return 'priming-timeout';
  if (cls === 'parking' && now.getTime() > parkingDeadline(instance, pool, keys)) return 'priming-timeout';
  return undefined;
}

/**
 * How long a running reused instance that is not activated may take to power off. Its LaunchTime
 * is its last start (a job's, or a re-prime's after a rolled-back activation): the later of the
 * parking tag's since plus the park window and that start plus the priming bound. Without the
 * bound, one that never powers off (a failed shutdown and a failed self-termination, or a job
 * that removed its own activation tags) would hold a place in the pool until its reuse age.
 */
export function parkingDeadline(instance: ObservedInstance, pool: PoolConfig, keys: TagKeys): number {
  const since = parseParking(instance.tags.get(keys.parking))?.since.getTime() ?? 0;
  return Math.max(since + REUSE_DEFAULTS.parkSeconds * 1000, instance.launchTime.getTime() + pool.warm.primingTimeoutSeconds * 1000);
}

/**
 * Over the target, what goes first: parked fresh standbys (oldest first), then parked reused
 * ones, least recently used first (LaunchTime is their last job's start; the longer a scope
 * has not come back, the smaller the chance of a cache hit), then priming and parking ones,
 * which are about to become useful.
 */
function overTargetOrder(kept: readonly Kept[], keys: TagKeys): Kept[] {
  const rank = (k: Kept) => (k.cls !== 'parked' ? 2 : k.instance.tags.has(keys.affinity) ? 1 : 0);
  return [...kept].sort((a, b) => rank(a) - rank(b) || a.instance.launchTime.getTime() - b.instance.launchTime.getTime());
}
