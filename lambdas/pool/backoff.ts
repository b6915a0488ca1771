import { CREATED_BY, launchTicketHoldSeconds, type PoolConfig, type TagKeys } from '../shared/contract';
import { templateVersionOf, type ObservedInstance } from '../shared/instances';

/**
 * Prime-failure back-off: a pool whose warm standbys keep failing to prime (a broken image,
 * a download that fails, a prepare command that cannot succeed) must not relaunch them in a
 * loop that bills and serves nothing. Pure functions over the pool's observed state and its
 * stored streak; the handler reads and writes the streak (one SSM parameter per pool) and
 * does the I/O.
 *
 * The bound, for a pool whose every prime fails: while no standby of the launch template has
 * primed, at most `limit` standbys prime at once; after a failure, one probe at a time, each
 * after a delay that doubles from BASE_DELAY_SECONDS and is the cap from the `limit`-th
 * failure in a row on. So at most `limit` launches precede the cap, and from then on probes
 * are more than `cap` apart (the cap plus the priming timeout): launches per hour stay at most
 * `limit + 3600 / cap` (test/pool/backoff.test.ts runs it on a simulated clock).
 *
 * Cold launches share the bound (`coldGate`): a cold instance that fails before its runner
 * starts tags itself with the reason (the contract's `startFailure` tag) and terminates; the
 * pool counts those tags into the same streak (each instance once), and scale-up launches
 * cold only as the same decision allows, with cold launches on their way counted like priming
 * standbys. One streak, one probe at a time, whichever path probes.
 *
 * "At once" and "one at a time" are decided per observation, and DescribeInstances is
 * eventually consistent: launchers that look in the same moment each see nothing on its way.
 * So every launch of an unproven or failing template also takes a launch ticket (`ticketNeed`,
 * lambdas/shared/launch-tickets.ts), which only one launcher wins per slot: the bound holds
 * however many scale-up invocations and pool runs race.
 */

/** The first delay after a prime failure; it doubles with each failure in a row, up to the cap. */
export const BASE_DELAY_SECONDS = 60;

export const PRIME_STREAK_VERSION = 1;

/** What the pool remembers about its standbys' primes (the pool's prime-state parameter). */
export interface PrimeStreak {
  readonly version: number;
  /** The launch template (id:version) the streak belongs to; another one starts afresh. */
  readonly template: string;
  /** Prime failures in a row (since a standby last primed, or the template changed). */
  readonly failures: number;
  /** A standby of this template has primed (parked): it is known to work. */
  readonly proven: boolean;
  /** When the last failure was observed (ISO 8601). */
  readonly lastFailureAt?: string;
  /** The latest launch time of the failures in the streak (ISO 8601): a success launched then or later ends it. */
  readonly lastFailureLaunchAt?: string;
  /** Why the last standby failed, as the pool saw it. */
  readonly lastReason?: string;
  /** The last standby that failed (its boot log stream has the instance's own reason). */
  readonly lastInstanceId?: string;
  /**
   * Standbys launched while the template was unproven or failing, whose prime decides the
   * streak: one seen activated has primed too (scale-up activates only parked standbys),
   * though its parked state may never be observed by a pool run (a job took it first).
   */
  readonly watching?: readonly string[];
  /**
   * Cold launches whose start failure (their `startFailure` tag) is counted already: the
   * terminated instance stays visible for about an hour and must not count on every run.
   * Kept across a new template, so an old template's failures never count for the new one.
   */
  readonly countedStarts?: readonly string[];
}

export interface PrimeFailure {
  readonly instanceId: string;
  readonly reason: string;
  /** When the failed instance launched; without it the failure counts as launched now. */
  readonly launchTime?: Date;
}

/** What one pool run observed about primes. */
export interface PrimeObservation {
  /** The pool's launch template now (id:version). */
  readonly template: string;
  /** Standbys this run evicted because they did not park in time: failed primes. */
  readonly failed: readonly PrimeFailure[];
  /** Parked standbys of the current template, each with its LaunchTime (its priming boot). */
  readonly parkedLaunchTimes: readonly Date[];
  /** Warm standbys seen parked or activated now: each has primed. */
  readonly primedIds?: ReadonlySet<string>;
}

export interface BackoffPolicy {
  /** Failures in a row after which the delay is the cap (N). */
  readonly limit: number;
  /** The longest delay between probes, in seconds. */
  readonly capSeconds: number;
}

export function freshStreak(template: string): PrimeStreak {
  return { version: PRIME_STREAK_VERSION, template, failures: 0, proven: false };
}

/**
 * The streak after this run's observation: failures in a row by launch order. A new template
 * starts afresh; a standby that parked (or a cold runner that took its job) launched at or
 * after the streak's latest failed launch ends the streak and proves the template; a failure
 * launched before this run's latest success is followed by that success and does not count
 * (a burst launched together with a few transient failures is no failing template); each
 * other failure extends it.
 */
export function nextStreak(previous: PrimeStreak | undefined, seen: PrimeObservation, now: Date): PrimeStreak {
  let s = previous && previous.template === seen.template ? previous : freshStreak(seen.template);
  if (previous?.countedStarts && s !== previous) s = { ...s, countedStarts: previous.countedStarts };
  // A streak stored before launch times were kept ends only at a success launched after its observation.
  const streakLaunch = s.lastFailureLaunchAt ? Date.parse(s.lastFailureLaunchAt) : s.lastFailureAt ? Date.parse(s.lastFailureAt) + 1 : -Infinity;
  const latestSuccess = Math.max(-Infinity, ...seen.parkedLaunchTimes.map((t) => t.getTime()));
  const watchedPrimed = (s.watching ?? []).some((id) => seen.primedIds?.has(id));
  if (watchedPrimed || (seen.parkedLaunchTimes.length > 0 && latestSuccess >= streakLaunch)) {
    const { watching: _done, ...rest } = s;
    s = { ...rest, failures: 0, proven: true };
  }
  const launchOf = (f: PrimeFailure) => f.launchTime?.getTime() ?? now.getTime();
  const failed = seen.failed.filter((f) => launchOf(f) > latestSuccess);
  const last = failed[failed.length - 1];
  if (last) {
    const launched = Math.max(s.failures > 0 && s.lastFailureLaunchAt ? Date.parse(s.lastFailureLaunchAt) : -Infinity, ...failed.map(launchOf));
    s = {
      ...s,
      failures: s.failures + failed.length,
      lastFailureAt: now.toISOString(),
      lastFailureLaunchAt: new Date(launched).toISOString(),
      lastReason: last.reason,
      lastInstanceId: last.instanceId,
    };
  }
  return s;
}

/** Seconds to wait after the `failures`-th failure in a row before the next probe. */
export function delaySeconds(failures: number, policy: BackoffPolicy): number {
  if (failures <= 0) return 0;
  if (failures >= policy.limit) return policy.capSeconds;
  return Math.min(policy.capSeconds, BASE_DELAY_SECONDS * 2 ** (failures - 1));
}

export interface LaunchDecision {
  /** Standbys to launch now. */
  readonly launch: number;
  /** The launch tickets those launches take (`ticketNeed`); none on the fast path. */
  readonly ticket?: TicketNeed;
  /** The streak reached the limit: the pool only probes, at the cap (the metric and alarm). */
  readonly backingOff: boolean;
  /** When the next probe may launch (set while a streak holds launches back). */
  readonly resumeAt?: Date;
}

/**
 * How many of the `wanted` standbys to launch now, given the streak and how many priming
 * ones exist. An unproven template primes at most `limit` at once (all of them may fail);
 * after a failure, one probe at a time once its delay has passed.
 */
export function decideLaunch(streak: PrimeStreak, policy: BackoffPolicy, wanted: number, priming: number, now: Date): LaunchDecision {
  const backingOff = streak.failures >= policy.limit;
  if (streak.failures === 0) {
    const launch = streak.proven ? wanted : Math.min(wanted, Math.max(0, policy.limit - priming));
    return { launch, backingOff };
  }
  const resumeAt = new Date(Date.parse(streak.lastFailureAt!) + delaySeconds(streak.failures, policy) * 1000);
  const launch = priming === 0 && now >= resumeAt ? Math.min(wanted, 1) : 0;
  return { launch, backingOff, resumeAt };
}

/**
 * What makes "at most `limit` before proof" and "one probe per window" hold under concurrency:
 * every launch of an unproven or failing template takes a launch ticket first, a conditional
 * write that only one launcher can win (lambdas/shared/launch-tickets.ts). Observing the other
 * launcher's instance cannot do it: DescribeInstances is eventually consistent, and two
 * invocations that look in the same moment both see no probe on its way.
 */
export interface TicketNeed {
  /** The streak's template (id:version[@image]): a new one has fresh tickets. */
  readonly template: string;
  /** The slots, one launch each, tried in order. */
  readonly slots: readonly string[];
  /**
   * How long a ticket spent on a launch holds its slot (contract `launchTicketHoldSeconds`): the
   * priming timeout plus the pool run that counts it, so by the time it frees, its launch has
   * primed or been counted as failed (then a new window has its own ticket). Shorter than a
   * job's maximum wait. A ticket whose launch is known not to have happened is given back at
   * once (lambdas/shared/launch-outcome.ts settles a lost answer).
   */
  readonly holdSeconds: number;
}

/**
 * The tickets a launch needs under `streak`: none for a proven template that is not failing
 * (the fast path stays a read); one of `limit` start tickets while the template is unproven
 * and the streak has not reached the limit (so at most `limit` launches before it backs off,
 * however many launchers race); otherwise the one probe ticket of the window, keyed by when
 * the window opened (its `resumeAt`, the same for every launcher reading the same streak).
 */
export function ticketNeed(streak: PrimeStreak, policy: BackoffPolicy, primingTimeoutSeconds: number): TicketNeed | undefined {
  if (streak.proven && streak.failures === 0) return undefined;
  const holdSeconds = launchTicketHoldSeconds(primingTimeoutSeconds);
  if (!streak.proven && streak.failures < policy.limit) {
    return { template: streak.template, slots: Array.from({ length: policy.limit }, (_, k) => `start#${k + 1}`), holdSeconds };
  }
  const resumeAt = new Date(Date.parse(streak.lastFailureAt!) + delaySeconds(streak.failures, policy) * 1000);
  return { template: streak.template, slots: [`probe#${resumeAt.toISOString()}`], holdSeconds };
}

/**
 * The streak after this run launched `launched`: while the template is unproven or failing,
 * they are watched (with those launched earlier that still prime), so a standby that primes
 * and is taken by a job before any pool run sees it parked still ends the streak.
 */
export function watchLaunched(s: PrimeStreak, launched: readonly string[], stillPriming: ReadonlySet<string>): PrimeStreak {
  if ((s.proven && s.failures === 0) || launched.length === 0) return s;
  const watching = [...(s.watching ?? []).filter((id) => stillPriming.has(id)), ...launched].slice(-100);
  return { ...s, watching };
}

export function encodeStreak(s: PrimeStreak): string {
  return JSON.stringify(s);
}

/** The stored streak, or undefined for anything this code did not write (then it starts afresh). */
export function decodeStreak(text: string | undefined): PrimeStreak | undefined {
  if (!text) return undefined;
  try {
    const s = JSON.parse(text) as Partial<PrimeStreak>;
    if (s.version !== PRIME_STREAK_VERSION || typeof s.template !== 'string' || !Number.isInteger(s.failures) || s.failures! < 0) return undefined;
    for (const ids of [s.watching, s.countedStarts]) if (ids !== undefined && !(Array.isArray(ids) && ids.every((id) => typeof id === 'string'))) return undefined;
    if (s.lastFailureLaunchAt !== undefined && !(typeof s.lastFailureLaunchAt === 'string' && !Number.isNaN(Date.parse(s.lastFailureLaunchAt)))) return undefined;
    if (typeof s.proven !== 'boolean' || (s.failures! > 0 && !(typeof s.lastFailureAt === 'string' && !Number.isNaN(Date.parse(s.lastFailureAt))))) return undefined;
    return s as PrimeStreak;
  } catch {
    return undefined;
  }
}

/**
 * The pool's launch template as the streak records it: a new version starts a new streak, and
 * so does a new image of a pool whose template resolves an image parameter at launch (its
 * version stays the same when a RunnerImage publishes).
 */
export function templateOf(pool: PoolConfig, imageId?: string): string {
  const template = `${pool.launchTemplateId}:${pool.launchTemplateVersion}`;
  return imageId ? `${template}@${imageId}` : template;
}

/** The streak's key this run; an image that could not be read keeps the stored one (no reset). */
function streakKey(stored: PrimeStreak | undefined, pool: PoolConfig, imageId: string | undefined): string {
  const template = templateOf(pool);
  if (pool.imageParameter && !imageId && stored?.template.startsWith(`${template}@`)) return stored.template;
  return templateOf(pool, imageId);
}

/**
 * One pool run's prime step: the streak after what the run observed (its parked standbys,
 * the failed primes it evicted) and how many of the `wanted` standbys to launch.
 */
export function primeStep(
  stored: PrimeStreak | undefined,
  pool: PoolConfig,
  seen: { readonly parkedLaunchTimes: readonly Date[]; readonly priming: number; readonly primedIds?: ReadonlySet<string>; readonly starts?: StartObservation },
  failed: readonly PrimeFailure[],
  wanted: number,
  now: Date,
  imageId?: string,
): { streak: PrimeStreak; decision: LaunchDecision } {
  let streak = nextStreak(stored, { template: streakKey(stored, pool, imageId), failed, parkedLaunchTimes: seen.parkedLaunchTimes, ...(seen.primedIds ? { primedIds: seen.primedIds } : {}) }, now);
  // Cold launches share the streak: their failures extend it, their started runners end it,
  // and those on their way hold a probe back as a priming standby does.
  if (seen.starts) streak = countStarts(streak, seen.starts, now);
  const policy = { limit: pool.warm.primeFailureLimit, capSeconds: pool.warm.primeBackoffCapSeconds };
  const decision = decideLaunch(streak, policy, wanted, seen.priming + (seen.starts?.inFlight ?? 0), now);
  const ticket = decision.launch > 0 ? ticketNeed(streak, policy, pool.warm.primingTimeoutSeconds) : undefined;
  return { streak, decision: ticket ? { ...decision, ticket } : decision };
}

/** What a pool's instances show about its cold launches (scale-up's CreateFleet). */
export interface StartObservation {
  /** Cold launches that failed before their runner started and are not counted yet. */
  readonly failed: readonly PrimeFailure[];
  /** Every failed cold launch in view, counted or not (the streak's `countedStarts` next). */
  readonly failedIds: readonly string[];
  /** LaunchTime of each cold launch whose runner took its job (job-started): it works. */
  readonly startedLaunchTimes: readonly Date[];
  /** Cold launches on their way: not gone, neither failed nor started. Each may still fail. */
  readonly inFlight: number;
}

/**
 * The pool's cold launches, from observed tags only. An instance of another launch template
 * version is not this template's evidence either way (when the pool names a version number).
 */
export function observeStarts(instances: readonly ObservedInstance[], keys: TagKeys, pool: PoolConfig, stored: PrimeStreak | undefined): StartObservation {
  const counted = new Set(stored?.countedStarts ?? []);
  const failed: PrimeFailure[] = [];
  const failedIds: string[] = [];
  const startedLaunchTimes: Date[] = [];
  let inFlight = 0;
  const numbered = /^\d+$/.test(pool.launchTemplateVersion);
  for (const i of instances) {
    if (i.tags.get(keys.pool) !== pool.name || i.tags.get(keys.createdBy) !== CREATED_BY.scaleUp || i.tags.has(keys.warmStandby)) continue;
    const version = templateVersionOf(i);
    if (numbered && version !== undefined && version !== pool.launchTemplateVersion) continue;
    const reason = i.tags.get(keys.startFailure);
    // A runner that took its job started, whatever came after (a start-failure tag written
    // later, by an older boot script or by hand, is no start failure).
    if (i.tags.has(keys.jobStarted)) startedLaunchTimes.push(i.launchTime);
    else if (reason !== undefined) {
      failedIds.push(i.id);
      if (!counted.has(i.id)) failed.push({ instanceId: i.id, reason: `cold launch: ${reason}`, launchTime: i.launchTime });
    } else if (i.state !== 'shutting-down' && i.state !== 'terminated') inFlight++;
  }
  return { failed, failedIds, startedLaunchTimes, inFlight };
}

/**
 * The streak after a pool run counted the cold launches it saw: their failures extend it, a
 * runner that took its job after the last failure ends it (as a standby that parks), and the
 * failures in view are remembered so the next run does not count them again.
 */
export function countStarts(s: PrimeStreak, starts: StartObservation, now: Date): PrimeStreak {
  const next = nextStreak(s, { template: s.template, failed: starts.failed, parkedLaunchTimes: starts.startedLaunchTimes }, now);
  const same = (next.countedStarts ?? []).length === starts.failedIds.length && starts.failedIds.every((id) => next.countedStarts!.includes(id));
  if (same) return next;
  const { countedStarts: _old, ...rest } = next;
  // At most 100 (the parameter holds 4 KB): an older one dropped counts again, failing safe.
  return starts.failedIds.length ? { ...rest, countedStarts: starts.failedIds.slice(-100) } : rest;
}

/** How many of the cold launches scale-up wants for a pool may launch now, and why not the rest. */
export interface ColdGate {
  readonly launch: number;
  /** When the next probe may launch (while the streak holds cold launches back). */
  readonly resumeAt?: Date;
  /** Why launches are held back: the back-off, or a streak that could not be read. */
  readonly held?: 'backoff' | 'unproven' | 'unreadable';
  /** The launch tickets the launches take (`ticketNeed`), also when none launches now; none for a proven template. */
  readonly ticket?: TicketNeed;
}

/**
 * Scale-up's share of the back-off, over the stored streak and what it observes now: the
 * failures the pool has not counted yet count already (with now as their time: the next probe
 * waits its whole delay from here), and cold launches on their way count as priming standbys
 * do. Then the pool's own rule decides (`decideLaunch`): a proven template launches all; an
 * unproven one at most `limit` at once, warm and cold together; a failing one one probe at a
 * time after its delay. An unreadable streak holds every cold launch (failing safe, as the
 * pool does). A standby of this template parked now (`parkedLaunchTimes`) has primed: it
 * proves the template as it does for the pool, even before a pool run records it.
 */
export function coldGate(
  stored: PrimeStreak | undefined | 'unreadable',
  pool: PoolConfig,
  seen: { readonly starts: StartObservation; readonly priming: number; readonly parkedLaunchTimes: readonly Date[] },
  wanted: number,
  now: Date,
): ColdGate {
  if (stored === 'unreadable') return { launch: 0, held: 'unreadable' };
  // A streak of another launch template version is no evidence about this one.
  const template = templateOf(pool);
  const current = stored && (stored.template === template || stored.template.startsWith(`${template}@`)) ? stored : undefined;
  const evidence = { ...seen.starts, startedLaunchTimes: [...seen.starts.startedLaunchTimes, ...seen.parkedLaunchTimes] };
  const s = countStarts(current ?? freshStreak(template), evidence, now);
  const policy = { limit: pool.warm.primeFailureLimit, capSeconds: pool.warm.primeBackoffCapSeconds };
  const d = decideLaunch(s, policy, wanted, seen.priming + seen.starts.inFlight, now);
  // Also when nothing launches now: a launch that happened on an earlier ticket is spent by it.
  const need = ticketNeed(s, policy, pool.warm.primingTimeoutSeconds);
  const ticket = need ? { ticket: need } : {};
  if (d.launch >= wanted) return { launch: d.launch, ...ticket };
  return { launch: d.launch, ...(d.resumeAt ? { resumeAt: d.resumeAt } : {}), held: s.failures > 0 ? 'backoff' : 'unproven', ...ticket };
}
