import { WARM_STANDBY_VALUE, type PoolConfig, type TagKeys } from '../shared/contract';
import { isActivated, templateVersionOf, type ObservedInstance } from '../shared/instances';

/**
 * What a pool instance is, from observed state only (DESIGN invariant 4).
 *
 * - active: activated by scale-up or launched cold for a job; the pool never touches it.
 * - claimed: a warm standby whose config parameter exists (a scale-up invocation owns it
 *   between its claim and its tags); the pool never touches it either.
 * - priming: a warm standby, not activated, pending/running/stopping (first boot, preparing).
 * - parked: a warm standby, not activated, stopped by a client-initiated shutdown.
 * - garbage: any other warm standby, e.g. stopped with a `Server.*` reason (a spot
 *   interruption, an internal error) or with no reason at all.
 * - gone: shutting-down or terminated; counts for nothing.
 *
 * Parked accepts both client-initiated codes through one branch: EC2 reports the priming
 * boot's own power-off as `Client.InstanceInitiatedShutdown`, moto reports every stop as
 * `Client.UserInitiatedShutdown` (so do EC2 console/API stops). The code path the moto tests
 * run is the one that runs on EC2; the EC2 signal the design relies on is
 * `Client.InstanceInitiatedShutdown` (see docs/control-plane.md).
 */
export type InstanceClass = 'active' | 'claimed' | 'priming' | 'parked' | 'garbage' | 'gone' | 'foreign';

export const PARKED_STATE_REASONS: ReadonlySet<string> = new Set(['Client.InstanceInitiatedShutdown', 'Client.UserInitiatedShutdown']);

export function classify(instance: ObservedInstance, keys: TagKeys, claimed: boolean): InstanceClass {
  if (instance.state === 'shutting-down' || instance.state === 'terminated') return 'gone';
  if (isActivated(instance, keys)) return 'active';
  if (instance.tags.get(keys.warmStandby) !== WARM_STANDBY_VALUE) return 'foreign';
  if (claimed) return 'claimed';
  if (instance.state === 'pending' || instance.state === 'running' || instance.state === 'stopping') return 'priming';
  if (instance.state === 'stopped' && instance.stateReason !== undefined && PARKED_STATE_REASONS.has(instance.stateReason)) return 'parked';
  return 'garbage';
}

export type EvictionReason = 'garbage' | 'max-age' | 'stale-template' | 'stale-image' | 'priming-timeout' | 'over-target';
export const EVICTION_REASONS: readonly EvictionReason[] = ['garbage', 'max-age', 'stale-template', 'stale-image', 'priming-timeout', 'over-target'];

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
  /** Warm standbys to launch so priming + parked reaches the target. */
  readonly launch: number;
  readonly parked: number;
  /** LaunchTime of each parked standby that stays (its priming boot): the prime-failure streak reads them. */
  readonly parkedLaunchTimes: Date[];
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
 * True when the instance was built from an image older than the current one. Only an instance
 * launched before the current image was published can be stale: one launched after it that
 * still shows another ImageId resolved the parameter differently (a version label, a lagging
 * read), and evicting it would relaunch the same image in a loop.
 */
export function staleImage(instance: ObservedInstance, image: CurrentImage | undefined): boolean {
  if (image === undefined || instance.imageId === undefined) return false;
  // EC2 gives LaunchTime in whole seconds: an instance of the publication's second counts as after it.
  const publishedSecond = Math.floor(image.publishedAt.getTime() / 1000) * 1000;
  return instance.imageId !== image.imageId && instance.launchTime.getTime() < publishedSecond;
}

/**
 * The pool's plan for one run: which warm standbys to evict (each with its reason) and how
 * many to launch. `claimedIds` are standbys with a config parameter; `image` is the current
 * value of the pool's image parameter, absent when it has none or it could not be read (then
 * no instance is evicted for its image). Only priming, parked
 * and garbage instances are ever evicted: never a claimed or an active one.
 *
 * Age is measured from LaunchTime, which EC2 moves on every start; a warm standby is
 * started once (its priming boot), so that is its age since it was built.
 */
export function planPool(
  instances: readonly ObservedInstance[],
  claimedIds: ReadonlySet<string>,
  pool: PoolConfig,
  keys: TagKeys,
  target: number,
  now: Date,
  image?: CurrentImage,
): PoolPlan {
  const evictions: Eviction[] = [];
  const kept: { instance: ObservedInstance; cls: 'parked' | 'priming' }[] = [];
  const staleParked: ObservedInstance[] = [];
  let active = 0;
  const ageSeconds = (i: ObservedInstance) => (now.getTime() - i.launchTime.getTime()) / 1000;
  for (const instance of instances) {
    const cls = classify(instance, keys, claimedIds.has(instance.id));
    if (cls === 'active') active++;
    if (cls === 'garbage') evictions.push({ instance, reason: 'garbage' });
    else if (cls === 'parked' || cls === 'priming') {
      if (staleTemplate(instance, pool)) evictions.push({ instance, reason: 'stale-template' });
      else if (staleImage(instance, image)) {
        if (cls === 'parked') staleParked.push(instance);
        else evictions.push({ instance, reason: 'stale-image' });
      }
      else if (cls === 'parked' && ageSeconds(instance) > pool.warm.maxAgeSeconds) evictions.push({ instance, reason: 'max-age' });
      else if (cls === 'priming' && ageSeconds(instance) > pool.warm.primingTimeoutSeconds) evictions.push({ instance, reason: 'priming-timeout' });
      else kept.push({ instance, cls });
    }
  }
  // Parked standbys of a superseded image keep serving until one of the current image has
  // parked: a new image that does not prime must not empty a working pool. Until then they go
  // as parked standbys always go (activated, max age), and their replacements use the new image.
  if (staleParked.length > 0) {
    if (kept.some((k) => k.cls === 'parked')) for (const instance of staleParked) evictions.push({ instance, reason: 'stale-image' });
    else for (const instance of staleParked) {
      if (ageSeconds(instance) > pool.warm.maxAgeSeconds) evictions.push({ instance, reason: 'max-age' });
      else kept.push({ instance, cls: 'parked' });
    }
  }
  const over = kept.length - target;
  if (over > 0) {
    // Oldest parked first, then oldest priming: a priming instance is about to become useful.
    const order = [...kept].sort(
      (a, b) => (a.cls === b.cls ? a.instance.launchTime.getTime() - b.instance.launchTime.getTime() : a.cls === 'parked' ? -1 : 1),
    );
    for (const k of order.slice(0, over)) evictions.push({ instance: k.instance, reason: 'over-target' });
  }
  const evicted = new Set(evictions.map((e) => e.instance.id));
  const remaining = kept.filter((k) => !evicted.has(k.instance.id));
  return {
    evictions,
    launch: Math.max(0, target - remaining.length),
    parked: remaining.filter((k) => k.cls === 'parked').length,
    parkedLaunchTimes: remaining.filter((k) => k.cls === 'parked').map((k) => k.instance.launchTime),
    priming: remaining.filter((k) => k.cls === 'priming').length,
    target,
    active,
  };
}
