import { randomUUID } from 'node:crypto';
import {
  CancelSpotInstanceRequestsCommand,
  CreateTagsCommand,
  RunInstancesCommand,
  TerminateInstancesCommand,
  type EC2Client,
  type RunInstancesCommandOutput,
  type Tag,
} from '@aws-sdk/client-ec2';
import { PutParameterCommand, GetParameterCommand, type GetParameterCommandOutput, type SSMClient } from '@aws-sdk/client-ssm';
import { errorName, isUnknownOutcome, mapLimit, READ, UnknownOutcomeError, WRITE_IDEMPOTENT, WRITE_ONCE, type AwsCaller } from '../shared/aws-call';
import { decodeRunnerRelease, PARAMETER_INSTANCE_TAG, RUNNER_VERSION_LATEST, ssmPaths, standbyLaunchTags, tagKeys, type FleetConfig, type PoolConfig, type SsmPaths, type TagKeys } from '../shared/contract';
import { ALL_STATES, describeFleet, isActivated, type ObservedInstance } from '../shared/instances';
import { createLogger, Metrics, type Logger, type Sink } from '../shared/log';
import { deleteRunnerConfigs } from '../shared/delete-configs';
import { EVICTION_MARKER, evictionMarker, listRunnerConfigs } from '../shared/parameters';
import { readPrimeStreak } from '../shared/prime-state';
import { encodeStreak, freshStreak, observeStarts, primeStep, watchLaunched, type LaunchDecision, type PrimeFailure, type PrimeStreak, type StartObservation } from './backoff';
import { keptTicketFields, unspentTickets, type LaunchTickets } from '../shared/launch-tickets';
import { settleLaunch } from '../shared/launch-outcome';
import { warmTarget } from './target';
import { classify, planPool, type CurrentImage, type CurrentRunner, type Eviction, type PoolPlan } from './classify';

export interface PoolDeps {
  readonly ec2: EC2Client;
  readonly ssm: SSMClient;
  readonly aws: AwsCaller;
  readonly loadConfig: () => Promise<FleetConfig>;
  /** The launch tickets scale-up takes too (lambdas/shared/launch-tickets.ts); production always has them. */
  readonly launchTickets?: LaunchTickets;
  readonly now?: () => Date;
  readonly sink?: Sink;
}

export interface PoolRunSummary {
  readonly pool: string;
  readonly target: number;
  readonly parked: number;
  /** Of `parked`, the reused ones (with an affinity). */
  readonly parkedReused: number;
  readonly priming: number;
  readonly launched: number;
  readonly evicted: Record<string, number>;
}

export { EVICTION_MARKER };

/**
 * An eviction marker this much older than now belongs to no live pool run (the function's
 * timeout is 2 minutes): it is one whose write answered too late to be read back, and the
 * next run removes it instead of leaving the instance unclaimable until the sweep.
 */
export const LEFTOVER_MARKER_MS = 5 * 60_000;

/**
 * The pool Lambda (on a schedule): per pool, evict what should go and launch warm standbys
 * up to the target of the moment. Eviction takes the same lock scale-up takes: it claims the
 * instance by writing its config parameter with Overwrite=false (a marker value), so an
 * instance scale-up has claimed is never evicted and one being evicted is never claimed;
 * then it re-observes the instance (a claim whose config was consumed already shows
 * activation tags) before it cancels a spot request and terminates.
 */
export function createPoolHandler(deps: PoolDeps): () => Promise<PoolRunSummary[]> {
  const now = deps.now ?? (() => new Date());
  return async () => {
    const config = await deps.loadConfig();
    const log = createLogger({ fn: 'pool' }, deps.sink);
    const metrics = new Metrics(config.metrics.namespace, deps.sink);
    const paths = ssmPaths(config.prefix);
    const summaries: PoolRunSummary[] = [];
    try {
      const claimed = await observeClaims(deps, paths, now(), log);
      for (const pool of config.pools) {
        const l = log.child({ pool: pool.name });
        try {
          summaries.push(await runPool(deps, config, pool, claimed, now(), l, metrics));
        } catch (error) {
          l.error('pool run failed', { error: (error as Error).message });
          metrics.add(config.metrics.names.jobsFailed, { Pool: pool.name, Reason: 'pool-run' });
        }
      }
    } finally {
      metrics.flush();
    }
    return summaries;
  };
}

/** The instances whose config path holds something, after removing this pool's leftover markers. */
async function observeClaims(deps: PoolDeps, paths: SsmPaths, now: Date, log: Logger): Promise<Set<string>> {
  const parameters = await listRunnerConfigs(deps.aws, deps.ssm, paths);
  const leftover = parameters.filter((p) => p.evictionMarker && now.getTime() - p.lastModified.getTime() > LEFTOVER_MARKER_MS);
  const gone = new Set<string>();
  if (leftover.length > 0) {
    const outcome = await deleteRunnerConfigs(deps.aws, deps.ssm, paths, leftover.map((p) => p.name), { delete: 'single', readBack: 'list' });
    for (const p of leftover) {
      if (outcome.gone.has(p.name)) gone.add(p.name);
      log.warn('removing a leftover eviction marker', { instanceId: p.instanceId, removed: outcome.gone.has(p.name) });
    }
  }
  return new Set(parameters.filter((p) => !gone.has(p.name)).map((p) => p.instanceId));
}

async function runPool(
  deps: PoolDeps,
  config: FleetConfig,
  pool: PoolConfig,
  claimed: ReadonlySet<string>,
  now: Date,
  log: Logger,
  metrics: Metrics,
): Promise<PoolRunSummary> {
  const keys = tagKeys(config.prefix);
  // Every state: a cold launch that failed tagged itself and terminated, and stays in view
  // (about an hour) for the streak to count; the plan counts gone instances for nothing.
  const instances = await describeFleet(deps.aws, deps.ec2, keys, { pool: pool.name, states: ALL_STATES });
  const target = warmTarget(pool, now);
  const image = await readCurrentImage(deps, pool, log);
  const stored = await readStreak(deps, config, pool, log);
  // A failing or unknown streak stops the runner roll: a new release that does not prime must
  // not take the parked instances that still work with it.
  const runner = stored !== 'unreadable' && (stored?.failures ?? 0) === 0 ? await readCurrentRunner(deps, config, pool, log) : undefined;
  const plan = planPool(instances, claimed, pool, keys, target, now, image, runner);
  const evicted = await evict(deps, config, plan.evictions, claimed, log, primeFailureReason(pool));
  const counts = countEvictions(evicted, config, pool, metrics);
  const prime = decidePrime({ instances, keys, pool, claimed, plan, evicted, stored, now, imageId: image?.imageId });
  logPrime(prime, pool, log);
  const launchedIds = prime.decision.launch > 0 ? await launchWithTickets(deps, config, pool, prime.decision, now, log) : [];
  const launched = launchedIds.length;
  if (prime.streak && stored !== 'unreadable') await settleStreak(deps, config, pool, stored, watchLaunched(prime.streak, launchedIds, prime.stillPriming), log);
  const names = config.metrics.names;
  metrics.add(names.primeBackoff, { Pool: pool.name }, prime.decision.backingOff ? 1 : 0);
  metrics.add(names.parked, { Pool: pool.name }, plan.parked);
  if (pool.reuse || plan.parkedReused > 0) metrics.add(names.parkedReused, { Pool: pool.name }, plan.parkedReused);
  metrics.add(names.active, { Pool: pool.name }, plan.active);
  metrics.add(names.priming, { Pool: pool.name }, plan.priming + launched);
  metrics.add(names.target, { Pool: pool.name }, target);
  log.info('pool run', { target, parked: plan.parked, parkedReused: plan.parkedReused, priming: plan.priming, launched, evicted: evicted.length });
  return { pool: pool.name, target, parked: plan.parked, parkedReused: plan.parkedReused, priming: plan.priming, launched, evicted: counts };
}

/** Evictions per reason, each counted as the `Evictions{Reason}` metric. */
function countEvictions(evicted: readonly Eviction[], config: FleetConfig, pool: PoolConfig, metrics: Metrics): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const e of evicted) {
    counts[e.reason] = (counts[e.reason] ?? 0) + 1;
    metrics.add(config.metrics.names.evictions, { Pool: pool.name, Reason: e.reason });
  }
  return counts;
}

interface PrimeInputs {
  readonly instances: readonly ObservedInstance[];
  readonly keys: TagKeys;
  readonly pool: PoolConfig;
  readonly claimed: ReadonlySet<string>;
  readonly plan: PoolPlan;
  readonly evicted: readonly Eviction[];
  readonly stored: PrimeStreak | undefined | 'unreadable';
  readonly now: Date;
  readonly imageId: string | undefined;
}

interface PrimeOutcome {
  readonly wanted: number;
  readonly failed: readonly PrimeFailure[];
  readonly starts: StartObservation | undefined;
  readonly streak: PrimeStreak | undefined;
  readonly decision: LaunchDecision;
  readonly stillPriming: ReadonlySet<string>;
}

/** How many standbys to launch this run, after the evictions and the prime back-off (no AWS call). */
function decidePrime(p: PrimeInputs): PrimeOutcome {
  const { instances, keys, pool, claimed, plan, evicted, stored } = p;
  // An eviction that did not happen still holds its place: launch only for those that did.
  // Garbage never held a place (the plan launches as if it were absent), so a garbage
  // instance that stays must not hold back a launch.
  const gone = new Set(evicted.map((e) => e.instance.id));
  const notEvicted = plan.evictions.filter((e) => e.reason !== 'garbage' && !gone.has(e.instance.id)).length;
  const wanted = Math.max(0, plan.launch - notEvicted);
  const failed: PrimeFailure[] = evicted.filter((e) => e.reason === 'priming-timeout').map((e) => ({ instanceId: e.instance.id, reason: primeFailureReason(pool), launchTime: e.instance.launchTime }));
  // An unreadable streak holds launches back for this run: failing safe, never in a loop.
  // Parked or activated: each has primed (scale-up activates only parked standbys), also one
  // gone since with its activation tags: a short job can take a standby and end between two
  // pool runs, and a fresh template's only standbys may all go that way. Not 'claimed': an
  // eviction marker left on a priming standby would look the same.
  const classes = instances.map((i) => ({ id: i.id, cls: classify(i, keys, claimed.has(i.id)), activated: isActivated(i, keys) }));
  const primedIds = new Set(classes.filter((c) => c.cls === 'parked' || c.cls === 'active' || (c.cls === 'gone' && c.activated)).map((c) => c.id));
  const stillPriming = new Set(classes.filter((c) => c.cls === 'priming' && !gone.has(c.id)).map((c) => c.id));
  const starts = stored === 'unreadable' ? undefined : observeStarts(instances, keys, pool, stored);
  const step = stored === 'unreadable' ? undefined : primeStep(stored, pool, { ...plan, primedIds, ...(starts ? { starts } : {}) }, failed, wanted, p.now, p.imageId);
  return { wanted, failed, starts, streak: step?.streak, decision: step?.decision ?? { launch: 0, backingOff: false }, stillPriming };
}

/** The failed primes and a held-back launch, as the lines the alarms and the operator read. */
function logPrime(prime: PrimeOutcome, pool: PoolConfig, log: Logger): void {
  const { streak, decision, wanted } = prime;
  for (const f of [...prime.failed, ...(prime.starts?.failed ?? [])]) {
    // The structured line the PrimeBackoff alarm's Logs Insights query finds.
    log.error('prime failed', { instanceId: f.instanceId, reason: f.reason, failuresInARow: streak?.failures, limit: pool.warm.primeFailureLimit });
  }
  if (decision.launch < wanted) {
    log.warn('prime back-off: holding launches back', {
      wanted,
      launching: decision.launch,
      failuresInARow: streak?.failures,
      resumeAt: decision.resumeAt?.toISOString(),
      lastReason: streak?.lastReason,
      lastInstanceId: streak?.lastInstanceId,
    });
  }
}

/**
 * Writes the streak only when it changed (nothing stored and a fresh streak is no change). A
 * fresh template's first launches are a change: they are watched, and one of them seen
 * activated later is what proves the template when no run saw it parked.
 */
async function settleStreak(deps: PoolDeps, config: FleetConfig, pool: PoolConfig, stored: PrimeStreak | undefined, streak: PrimeStreak, log: Logger): Promise<void> {
  const unchanged = encodeStreak(streak) === encodeStreak(stored ?? freshStreak(streak.template));
  if (!unchanged) await writeStreak(deps, config, pool, streak, log);
}

/**
 * The decision's launches, each with a launch ticket when the template is unproven or failing
 * (lambdas/shared/launch-tickets.ts): scale-up takes the same tickets for its cold launches,
 * so the pool's standbys and any number of scale-up invocations share one bound. Only the
 * tickets won launch. What did not launch gives its tickets back (`unspentTickets`): a refusal
 * of a first send. A lost answer is settled by its token and a resend (launch-outcome.ts): what
 * it launched keeps its tickets; an outcome that stays unknown keeps them all until their
 * expiry (it may have launched).
 */
async function launchWithTickets(deps: PoolDeps, config: FleetConfig, pool: PoolConfig, decision: LaunchDecision, now: Date, log: Logger): Promise<string[]> {
  if (!decision.ticket || !deps.launchTickets) return (await launchStandbys(deps, config, pool, decision.launch, log)).ids;
  const { taken, errors } = await deps.launchTickets.take(pool.name, decision.ticket, decision.launch, now);
  if (errors.length) log.error('taking launch tickets failed: no launch for those', { errors });
  if (taken.length < decision.launch) log.warn('prime back-off: launch tickets taken elsewhere', { wanted: decision.launch, launching: taken.length, template: decision.ticket.template });
  if (taken.length === 0) return [];
  let out: Awaited<ReturnType<typeof launchStandbys>>;
  try {
    out = await launchStandbys(deps, config, pool, taken.length, log);
  } catch (error) {
    // Whether it launched is unknown: the tickets stay (failing safe), named for the operator.
    for (const t of taken) log.error('the launch after a launch ticket threw; the ticket is kept until its expiry', { ...keptTicketFields(pool.name, t), error: errorName(error) });
    throw error;
  }
  if (out.unknown) for (const t of taken) log.warn('the launch may have happened: its launch ticket is kept until its expiry', keptTicketFields(pool.name, t));
  // At once, not one after another: each release may resend with backoff (launch-tickets.ts),
  // and the run has other pools to serve within its timeout.
  const tickets = deps.launchTickets;
  await mapLimit(unspentTickets(taken, out.ids.length, out.unknown), RELEASE_CONCURRENCY, async (t) => {
    const r = await tickets.release(t);
    if (!r.released) log.warn('releasing a launch ticket failed; it frees at its expiry', { ...keptTicketFields(pool.name, t), error: r.error });
  });
  return out.ids;
}

/**
 * The value of the pool's image parameter (a RunnerImage's, resolved by the launch template at
 * launch) and when it was written; undefined when the pool has none or the read fails, and
 * then nothing is evicted for its image this run (an unknown image is no reason to evict).
 */
async function readCurrentImage(deps: PoolDeps, pool: PoolConfig, log: Logger): Promise<CurrentImage | undefined> {
  if (pool.imageParameter === undefined) return undefined;
  try {
    const out = await deps.aws.send<GetParameterCommandOutput>(deps.ssm, new GetParameterCommand({ Name: pool.imageParameter }), READ);
    const imageId = out.Parameter?.Value;
    const publishedAt = out.Parameter?.LastModifiedDate;
    if (imageId && publishedAt) return { imageId, publishedAt };
    log.warn('the image parameter has no value or date: no image evictions this run', { parameter: pool.imageParameter });
  } catch (error) {
    log.warn('reading the image parameter failed: no image evictions this run', { parameter: pool.imageParameter, error: errorName(error) });
  }
  return undefined;
}

/**
 * The release a pool that follows the newest one installs now (the resolver's parameter);
 * undefined for a pinned pool, and when the parameter is missing, unreadable or malformed:
 * then nothing is replaced for its runner this run (an unknown release is no reason to evict).
 */
async function readCurrentRunner(deps: PoolDeps, config: FleetConfig, pool: PoolConfig, log: Logger): Promise<CurrentRunner | undefined> {
  if (pool.runnerVersion !== RUNNER_VERSION_LATEST) return undefined;
  const name = ssmPaths(config.prefix).runnerRelease(pool.provider);
  try {
    const out = await deps.aws.send<GetParameterCommandOutput>(deps.ssm, new GetParameterCommand({ Name: name }), READ);
    const release = decodeRunnerRelease(out.Parameter?.Value ?? '');
    if (!('problems' in release)) return { version: release.version };
    log.warn('the resolved runner release does not parse: no runner replacements this run', { parameter: name, problems: release.problems });
  } catch (error) {
    // Not resolved yet (a fresh fleet) is no warning: the boot installs the pin meanwhile.
    if (errorName(error) !== 'ParameterNotFound') log.warn('reading the resolved runner release failed: no runner replacements this run', { parameter: name, error: errorName(error) });
  }
  return undefined;
}

/** Why the pool calls a standby's prime failed: it did not park in time (the instance's own reason is in its boot log). */
function primeFailureReason(pool: PoolConfig): string {
  return `did not park within ${pool.warm.primingTimeoutSeconds}s`;
}

/** The pool's prime streak: undefined when none is stored, 'unreadable' when SSM did not answer. */
async function readStreak(deps: PoolDeps, config: FleetConfig, pool: PoolConfig, log: Logger): Promise<PrimeStreak | undefined | 'unreadable'> {
  const name = ssmPaths(config.prefix).primeState(pool.name);
  const stored = await readPrimeStreak(deps.aws, deps.ssm, name);
  if (stored === undefined || !('unreadable' in stored)) return stored;
  log.error('reading the prime streak failed: no launches this run', { parameter: name, error: stored.unreadable });
  return 'unreadable';
}

/**
 * One String parameter per pool, written only when the streak changes: the failed standbys
 * themselves cannot hold it, since they are terminated and drop out of DescribeInstances
 * within about an hour, as long as the default cap.
 */
async function writeStreak(deps: PoolDeps, config: FleetConfig, pool: PoolConfig, streak: PrimeStreak, log: Logger): Promise<void> {
  const name = ssmPaths(config.prefix).primeState(pool.name);
  try {
    await deps.aws.send(deps.ssm, new PutParameterCommand({ Name: name, Value: encodeStreak(streak), Type: 'String', Overwrite: true }), WRITE_IDEMPOTENT);
  } catch (error) {
    log.error('writing the prime streak failed', { parameter: name, error: errorName(error) });
  }
}

async function evict(
  deps: PoolDeps,
  config: FleetConfig,
  evictions: readonly Eviction[],
  claimed: ReadonlySet<string>,
  log: Logger,
  primeFailure: string,
): Promise<Eviction[]> {
  if (evictions.length === 0) return [];
  const keys = tagKeys(config.prefix);
  const paths = ssmPaths(config.prefix);
  // 1. Take the lock: the claim write scale-up uses.
  const locked: Eviction[] = [];
  for (const e of evictions) if (await lock(deps, paths, e, log)) locked.push(e);
  // 2. Observe again under the lock: only what is still an unactivated standby goes. A look
  //    that fails terminated nothing: the locks are released before the run fails.
  let observed: Awaited<ReturnType<typeof reobserveLocked>>;
  try {
    observed = await reobserveLocked(deps, keys, locked, claimed, log);
  } catch (error) {
    await removeMarkers(deps, paths, locked.map((e) => e.instance.id), log);
    throw error;
  }
  const { go, release } = observed;
  // 3. A persistent spot request respawns its instance when the instance is terminated
  //    first: cancel the requests, and keep any instance whose request could not be cancelled.
  const cancelFailed = await cancelSpotRequests(deps, go, log);
  const terminate = go.filter((e) => !cancelFailed.has(e.instance.id));
  for (const id of cancelFailed) release.push(id);
  await tagFailedPrimes(deps, keys, terminate, primeFailure, log);
  const { terminated, kept } = await terminateEvictions(deps, keys, terminate, log);
  for (const e of kept) release.push(e.instance.id);
  // 4. Drop the parameters in this run: of what is gone (a parameter of a terminated instance
  //    may hold a runner secret if a claim slipped in) and of what stays (so it can be claimed).
  await removeMarkers(deps, paths, [...terminated.map((e) => e.instance.id), ...release], log);
  return terminated;
}

/** The locked evictions still an unactivated standby (`go`), and the ids of the others, whose locks are released. */
async function reobserveLocked(
  deps: PoolDeps,
  keys: TagKeys,
  locked: readonly Eviction[],
  claimed: ReadonlySet<string>,
  log: Logger,
): Promise<{ go: Eviction[]; release: string[] }> {
  const now = locked.length ? await describeFleet(deps.aws, deps.ec2, keys, { instanceIds: locked.map((e) => e.instance.id) }) : [];
  const current = new Map(now.map((i) => [i.id, i]));
  const go: Eviction[] = [];
  const release: string[] = [];
  for (const e of locked) {
    const i = current.get(e.instance.id);
    const cls = i ? classify(i, keys, claimed.has(i.id)) : 'gone';
    if (i && (cls === 'parked' || cls === 'priming' || cls === 'parking' || cls === 'garbage')) go.push({ instance: i, reason: e.reason });
    else {
      log.info('not evicting: the instance changed since it was observed', { instanceId: e.instance.id, now: cls });
      release.push(e.instance.id);
    }
  }
  return { go, release };
}

/** Cancels the spot requests of `go` in one call; the ids whose request may still stand (the call failed). */
async function cancelSpotRequests(deps: PoolDeps, go: readonly Eviction[], log: Logger): Promise<Set<string>> {
  const spot = go.filter((e) => e.instance.spotRequestId);
  if (spot.length === 0) return new Set();
  try {
    await deps.aws.send(
      deps.ec2,
      new CancelSpotInstanceRequestsCommand({ SpotInstanceRequestIds: spot.map((e) => e.instance.spotRequestId!) }),
      WRITE_IDEMPOTENT,
    );
    return new Set();
  } catch (error) {
    log.error('cancelling spot requests failed; their instances stay', { error: errorName(error) });
    return new Set(spot.map((e) => e.instance.id));
  }
}

/** A failed prime keeps its reason on the instance (visible while EC2 lists it). Best effort. */
async function tagFailedPrimes(deps: PoolDeps, keys: TagKeys, terminate: readonly Eviction[], primeFailure: string, log: Logger): Promise<void> {
  const failedPrimes = terminate.filter((e) => e.reason === 'priming-timeout').map((e) => e.instance.id);
  if (failedPrimes.length === 0) return;
  try {
    await deps.aws.send(deps.ec2, new CreateTagsCommand({ Resources: failedPrimes, Tags: [{ Key: keys.primeFailure, Value: primeFailure }] }), WRITE_IDEMPOTENT);
  } catch (error) {
    log.warn('tagging failed primes failed', { instances: failedPrimes.length, error: errorName(error) });
  }
}

/** Deletes the markers (or configs) of `ids`: not found is done; a lost answer is read back. */
async function removeMarkers(deps: PoolDeps, paths: SsmPaths, ids: readonly string[], log: Logger): Promise<void> {
  if (ids.length === 0) return;
  const outcome = await deleteRunnerConfigs(deps.aws, deps.ssm, paths, ids.map((id) => paths.runnerConfig(id)), { delete: 'single', readBack: 'list' });
  for (const id of ids) {
    if (!outcome.gone.has(paths.runnerConfig(id))) log.warn('removing an eviction marker failed; the sweep removes it', { instanceId: id, errors: outcome.errors });
  }
}

/**
 * Terminates in one call. Any failure may follow an attempt that ran: the call is retried,
 * and only the last attempt's error is seen (a lost answer, then throttling or a refusal).
 * So every failure is resolved by describing the instances again: what is shutting-down,
 * terminated or no longer listed went; what is still live stays (its marker is released with
 * the others, so a parked one can be claimed and the next run evicts it again). Unobservable:
 * all count as staying, failing safe (they hold their places, so this run launches fewer; the
 * next run counts what exists).
 */
async function terminateEvictions(deps: PoolDeps, keys: TagKeys, list: readonly Eviction[], log: Logger): Promise<{ terminated: Eviction[]; kept: Eviction[] }> {
  if (list.length === 0) return { terminated: [], kept: [] };
  let terminated: Eviction[] = [...list];
  try {
    await deps.aws.send(deps.ec2, new TerminateInstancesCommand({ InstanceIds: list.map((e) => e.instance.id) }), WRITE_IDEMPOTENT);
  } catch (error) {
    if (!isUnknownOutcome(error)) log.error('terminating evicted instances failed', { instances: list.length, error: errorName(error) });
    terminated = await observeTerminated(deps, keys, list, error, log);
  }
  for (const e of terminated) log.info('evicted', { instanceId: e.instance.id, reason: e.reason });
  return { terminated, kept: list.filter((e) => !terminated.includes(e)) };
}

/** Ticket releases in flight at once (a refill takes at most `primeFailureLimit` tickets). */
const RELEASE_CONCURRENCY = 10;

const TERMINATING = new Set(['shutting-down', 'terminated']);

async function observeTerminated(deps: PoolDeps, keys: TagKeys, list: readonly Eviction[], error: unknown, log: Logger): Promise<Eviction[]> {
  try {
    const seen = await describeFleet(deps.aws, deps.ec2, keys, { instanceIds: list.map((e) => e.instance.id), states: ALL_STATES });
    const state = new Map(seen.map((i) => [i.id, i.state]));
    const went = list.filter((e) => !state.has(e.instance.id) || TERMINATING.has(state.get(e.instance.id)!));
    log.warn('terminate outcome unknown, resolved by describing the instances', { instances: list.length, terminating: went.length, error: errorName(error) });
    return went;
  } catch (readError) {
    log.error('terminate outcome unknown and describing failed; the instances count as not evicted', { instances: list.length, error: errorName(error), readError: errorName(readError) });
    return [];
  }
}

/**
 * Writes the eviction marker with Overwrite=false: true when it holds the lock. A write whose
 * answer was lost may have landed: it is read back by listing (a String marker is readable
 * there, a claim is not), so a marker that landed, with this lock's own value, is held and
 * removed with the others; another run's marker or a claim is not ours.
 * One that cannot be read back is left to the next run (`LEFTOVER_MARKER_MS`).
 */
async function lock(deps: PoolDeps, paths: SsmPaths, e: Eviction, log: Logger): Promise<boolean> {
  const name = paths.runnerConfig(e.instance.id);
  const value = evictionMarker();
  try {
    await deps.aws.send(
      deps.ssm,
      new PutParameterCommand({ Name: name, Value: value, Type: 'String', Overwrite: false, Tags: [{ Key: PARAMETER_INSTANCE_TAG, Value: e.instance.id }] }),
      WRITE_ONCE,
    );
    return true;
  } catch (error) {
    if (!(error instanceof UnknownOutcomeError)) {
      log.info('not evicting: the instance was claimed meanwhile', { instanceId: e.instance.id, reason: e.reason, error: errorName(error) });
      return false;
    }
    try {
      const held = (await listRunnerConfigs(deps.aws, deps.ssm, paths)).some((p) => p.name === name && p.markerValue === value);
      log.warn('eviction lock outcome unknown, resolved by listing', { instanceId: e.instance.id, held });
      return held;
    } catch (readError) {
      log.error('eviction lock outcome unknown and unreadable; the next run removes a leftover marker', { instanceId: e.instance.id, error: errorName(readError) });
      return false;
    }
  }
}

/**
 * Launches warm standbys: shutdown behaviour "stop" (the priming boot powers off into
 * parked), the warm-standby and pool tags, and for spot pools a persistent request whose
 * interruption stops rather than terminates (fleet-launched spot cannot be stopped).
 * Instance types and subnets are tried in order on capacity errors, a definite refusal.
 *
 * A launch whose answer was lost (a reset, a 503 after the fact, a reply past the timeout)
 * may have launched: it is never read as a refusal that moves on to the next type, which
 * would launch the standbys twice. Each launch carries a fresh ClientToken, also as a tag,
 * and a lost one is settled (`settleLaunch`): looked up by that tag (what is found is what
 * was launched), else sent again with the same token, which EC2 answers with what the first
 * launched or launches once. `unknown`: every send lost its answer, or a resend launched
 * nothing (refused: the lost send may still land, so no other type or subnet is tried beside
 * it); the run stops launching for the pool, keeps the tickets, and the next run counts what
 * exists.
 */
async function launchStandbys(deps: PoolDeps, config: FleetConfig, pool: PoolConfig, count: number, log: Logger): Promise<{ ids: string[]; refused: boolean; unknown: boolean }> {
  const keys = tagKeys(config.prefix);
  let lastError = '';
  for (const subnet of pool.subnetIds) {
    for (const type of pool.instanceTypes) {
      const token = randomUUID();
      const command = runStandbys(pool, keys, count, type, subnet, token);
      const r = await settleLaunch(
        () => deps.aws.send<RunInstancesCommandOutput>(deps.ec2, command, WRITE_ONCE),
        async () => (await describeFleet(deps.aws, deps.ec2, keys, { pool: pool.name, tag: { key: keys.launchToken, value: token } })).map((i) => i.id),
        (out) => (out.Instances ?? []).map((i) => i.InstanceId ?? '').filter((id) => id !== ''),
      );
      if (r.lost > 0) log.warn('launch outcome unknown, settled by its token', { outcome: r.kind, lostAnswers: r.lost, instanceType: type, subnet });
      if (r.kind === 'answered') {
        const ids = (r.out.Instances ?? []).map((i) => i.InstanceId ?? '').filter((id) => id !== '');
        log.info('launched warm standbys', { count: ids.length, instanceType: type, subnet });
        return { ids, refused: false, unknown: false };
      }
      if (r.kind === 'found') return { ids: [...r.ids], refused: false, unknown: false };
      if (r.kind === 'unknown') {
        log.error('launch outcome unknown after every resend; the next run counts what exists', { error: r.error });
        return { ids: [], refused: false, unknown: true };
      }
      lastError = errorName(r.error);
      log.warn('launching warm standbys failed, trying the next type or subnet', { instanceType: type, subnet, error: lastError });
    }
  }
  log.error('no warm standby could be launched', { error: lastError });
  // Every attempt was answered with a refusal: nothing launched.
  return { ids: [], refused: true, unknown: false };
}

export function runStandbys(pool: PoolConfig, keys: TagKeys, count: number, type: string, subnet: string, token: string): RunInstancesCommand {
  const tags: Tag[] = standbyLaunchTags(keys, pool.name, token);
  return new RunInstancesCommand({
    // All or nothing: on a capacity error the next type or subnet is tried for the
    // whole count (moto also launches only MinCount, where EC2 launches up to MaxCount).
    MinCount: count,
    MaxCount: count,
    ClientToken: token,
    LaunchTemplate: { LaunchTemplateId: pool.launchTemplateId, Version: pool.launchTemplateVersion },
    InstanceType: type as never,
    SubnetId: subnet,
    InstanceInitiatedShutdownBehavior: 'stop',
    ...(pool.spot ? { InstanceMarketOptions: { MarketType: 'spot', SpotOptions: { SpotInstanceType: 'persistent', InstanceInterruptionBehavior: 'stop' } } } : {}),
    TagSpecifications: [
      { ResourceType: 'instance', Tags: tags },
      { ResourceType: 'volume', Tags: tags.slice(0, 1) },
    ],
  });
}
