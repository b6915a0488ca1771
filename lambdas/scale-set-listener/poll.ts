import {
  QueueTokenExpiredError,
  SCALE_SET_RECENT_START_MS,
  SessionConflictError,
  SessionGoneError,
  type PoolConfig,
  type ScaleSetApi,
  type ScaleSetDemand,
  type ScaleSetDemandResult,
  type ScaleSetJobEvent,
  type PoolScaleSetConfig,
  type ScaleSetSession,
  type ScaleSetStartedRunner,
  type ScaleSetStatistics,
} from '../shared/contract';
import { errorName } from '../shared/aws-call';
import type { Logger } from '../shared/log';
import { LONG_POLL_TIMEOUT_MS } from '../ci/scale-set';
import { CAPACITY_CALL, demandRefused } from './capacity';
import type { AcquireOutcome, Lease, LeaseState, ScaleSetLeases } from './lease';

/**
 * One invocation's poll of one scale set (docs/scale-set.md, "The listener"): take the lease,
 * go on with the session the last holder left open, long-poll until shortly before the
 * deadline, and give the lease back with the session still open for the next invocation.
 *
 * Unlike the client's listener (`actions/scaleset` listener/listener.go `handleMessage`, which
 * deletes a message before its handlers run), a message is acknowledged only AFTER its job
 * events and its demand were handled: a crash in between leaves it unacknowledged, and GitHub
 * delivers it again to the next poller. Handling it twice is harmless: job events are tags
 * written again, and the demand is recomputed from observed instances by scale-up.
 */

export interface PollDeps {
  readonly api: ScaleSetApi;
  readonly leases: ScaleSetLeases;
  /** This invocation's id: the lease holder and the session owner. */
  readonly holder: string;
  /** When the invocation must be done (its timeout less a reserve): the lease never runs past it. */
  readonly deadline: Date;
  /** The last poll ends this long before the deadline, leaving time to hand a message on and release. */
  readonly marginMs: number;
  readonly now: () => Date;
  readonly log: Logger;
  /** Marks runners busy and finished for scale-down (jobs.ts). Throws when it could not. */
  readonly jobEvents: (pool: PoolConfig, events: readonly ScaleSetJobEvent[]) => Promise<void>;
  /** Scale-up's synchronous invocation. Throws when it could not be asked. */
  readonly requestCapacity: (demand: ScaleSetDemand) => Promise<ScaleSetDemandResult>;
  /**
   * A demand is sent only with this left before the deadline (default `DEMAND_BOUND_MS`: scale-up's
   * bound and the reserve after it). A compressed clock (the local sandbox) scales it down.
   */
  readonly demandBoundMs?: number;
  /** A trace id per reading. */
  readonly traceId: () => string;
  readonly sleep?: (ms: number) => Promise<void>;
}

/** While the lease is held, it is asked for again at most this often. */
export const LEASE_RETRY_MS = 2_000;
/**
 * An invocation that finds the lease held waits for it only when the holder's release is due
 * within this: the one scheduled invocation that arrives at the hand-over. The earlier ones,
 * which would wait minutes, return at once, so the listener bills about one poller's time.
 */
export const LEASE_HANDOVER_WAIT_MS = 20_000;
/** What a renewal's term leaves beyond the call it covers: the renewal's own write (a slow one is caught, below). */
export const LEASE_TERM_SPARE_MS = 20_000;
/**
 * The lease runs this long past each renewal, never past the deadline. Every poll and every
 * demand is preceded by its own renewal, so the term covers the longer of the two calls (the
 * client's long poll, scale-up's invocation) and a spare, not both. After each renewal the
 * expiry written is checked against the call it is for: a poll is cut at it, and a demand is not
 * sent unless scale-up's whole bound fits. The job events, which can take far longer under
 * throttling, need not fit. A holder that crashed frees the lease this long after its last
 * renewal, not at its invocation's deadline.
 */
export const LEASE_TERM_MS = Math.max(LONG_POLL_TIMEOUT_MS, CAPACITY_CALL.timeoutMs) + LEASE_TERM_SPARE_MS;
/**
 * A demand is sent only with scale-up's bound (`CAPACITY_CALL.timeoutMs`) and this left before
 * the deadline: the acknowledgement and the lease write after it. One that could not end in
 * time is not sent (the message stays for the next poller): a listener killed at its deadline
 * would leave a scale-up running beside the next holder's demand.
 */
export const DEMAND_RESERVE_MS = 10_000;
export const DEMAND_BOUND_MS = CAPACITY_CALL.timeoutMs + DEMAND_RESERVE_MS;

/**
 * Scale-up's invocation at its longest (`CAPACITY_CALL`) within a demand bound: after the renewal
 * right before a demand the lease must run at least this long. A compressed clock (the local
 * sandbox), which scales the bound, scales this with it.
 */
function demandCallMs(deps: PollDeps): number {
  return ((deps.demandBoundMs ?? DEMAND_BOUND_MS) * CAPACITY_CALL.timeoutMs) / DEMAND_BOUND_MS;
}
/**
 * Scale-up serves a bounded part of a shortfall per demand (scale-set-serve.ts
 * `SCALE_SET_SLOTS_PER_DEMAND`) and answers the rest `unserved`: the next demand is sent at
 * once, while the last one started something, at most this many for one reading.
 */
export const MAX_DEMANDS_PER_READING = 5;

/** How a poll ended; each is logged (and the failures counted) by the handler. */
export type PollOutcome =
  /** Polled until the deadline (or a handling failure left a message for the next poller). */
  | { readonly kind: 'polled'; readonly messages: number; readonly demands: number; readonly stopped?: string }
  /** Another invocation holds the lease. */
  | { readonly kind: 'held' }
  /** The scale set does not exist at GitHub (yet): the construct's resource creates it. */
  | { readonly kind: 'no-scale-set' }
  /** Another session is active and none could be taken over: nothing until the next invocation. */
  | { readonly kind: 'conflict' }
  /** The lease was lost mid-poll: this poller stopped at once. */
  | { readonly kind: 'lease-lost'; readonly messages: number }
  | { readonly kind: 'failed'; readonly error: string };

export async function pollScaleSet(deps: PollDeps, pool: PoolConfig & { readonly scaleSet: PoolScaleSetConfig }): Promise<PollOutcome> {
  const log = deps.log.child({ pool: pool.name, scaleSet: pool.scaleSet.name });
  const taken = await takeLease(deps, pool.name);
  if (taken.kind === 'held') return { kind: 'held' };
  if (taken.kind === 'failed') return { kind: 'failed', error: `lease: ${taken.error}` };
  const lease = taken.lease;
  // What the lease item says at the end: the session left open, the last message acknowledged, the runners started.
  const run: Run = { state: taken.state, capacityUnknown: false };
  let lost = false;
  try {
    const found = await deps.api.findScaleSet(pool.scaleSet.name, pool.scaleSet.runnerGroup);
    if (!found) return { kind: 'no-scale-set' };
    const opened = await openSession(deps, lease, run.state, found.id, log);
    if (opened.kind !== 'open') {
      lost = opened.kind === 'lease-lost';
      return opened.kind === 'lease-lost' ? { kind: 'lease-lost', messages: 0 } : opened;
    }
    run.state = opened.state;
    const outcome = await listen(deps, lease, pool, opened.session, run, log);
    lost = outcome.kind === 'lease-lost';
    return outcome;
  } catch (error) {
    return { kind: 'failed', error: errorName(error) === 'Error' ? (error as Error).message : errorName(error) };
  } finally {
    // A lost lease is someone else's now: nothing of it is ours to write.
    if (!lost) {
      // A scale-up whose answer did not come may still run: the lease is kept until its timeout
      // has passed, so no next holder's demand starts beside it.
      // Scale-up's cold start is outside its timeout: the call's bound (which has that margin) is held.
      const hold = run.capacityUnknown ? new Date(deps.now().getTime() + CAPACITY_CALL.timeoutMs) : undefined;
      const r = await deps.leases.release(lease, { ...run.state, recentlyStarted: recent(run.state.recentlyStarted, deps.now()) }, hold);
      if (r !== 'done') log.warn('releasing the scale-set lease failed; it frees at its expiry', { outcome: typeof r === 'string' ? r : r.error });
    }
  }
}

/** What a poll carries from step to step, and leaves in the lease item. */
interface Run {
  state: LeaseState;
  /** A demand's invocation of scale-up failed or its answer was lost: scale-up may still be running. */
  capacityUnknown: boolean;
}

/** The lease's expiry after a renewal now: a term on, never past the invocation's deadline. */
function leaseExpiry(deps: PollDeps): Date {
  return new Date(Math.min(deps.deadline.getTime(), deps.now().getTime() + LEASE_TERM_MS));
}

/** The runners started less than `SCALE_SET_RECENT_START_MS` ago (scale-up counts no older ones). */
function recent(runners: readonly ScaleSetStartedRunner[] | undefined, now: Date): ScaleSetStartedRunner[] {
  return (runners ?? []).filter((r) => now.getTime() - Date.parse(r.startedAt) < SCALE_SET_RECENT_START_MS);
}

/**
 * The lease, or the answer that another holder has it. A holder stops polling `marginMs`
 * before its deadline and then releases; it writes that moment (`releaseAt`) when it takes the
 * lease. An invocation that finds the lease held with its release, or its expiry, at most
 * `LEASE_HANDOVER_WAIT_MS` away waits for it (and asks every `LEASE_RETRY_MS` after it, for
 * that long past the release), so
 * the scale set is polled on without the gap of a schedule period. A bounded wait, never a
 * spin: a live holder renews its expiry, and the waiter then finds it further off and returns;
 * a crashed holder's lease is taken once its short expiry has passed.
 */
async function takeLease(deps: PollDeps, pool: string): Promise<AcquireOutcome> {
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const end = deps.deadline.getTime() - deps.marginMs;
  for (;;) {
    const taken = await deps.leases.acquire(pool, deps.holder, { expiresAt: leaseExpiry(deps), releaseAt: new Date(end) }, deps.now());
    if (taken.kind !== 'held' || taken.expiresAt === undefined) return taken;
    const now = deps.now().getTime();
    // The holder stops on the tick and writes its release tens of milliseconds later, and
    // `releaseAt` is rounded down to the second: a waiter woken at it is often early. For a grace
    // of `LEASE_HANDOVER_WAIT_MS` after it the waiter asks again every `LEASE_RETRY_MS`; only
    // then is a holder still at work waited for until its expiry, not asked every few seconds.
    const releaseMs = taken.releaseAt === undefined ? undefined : taken.releaseAt * 1000;
    const release = releaseMs !== undefined && now < releaseMs + LEASE_HANDOVER_WAIT_MS ? releaseMs : taken.expiresAt * 1000;
    const free = Math.min(release, taken.expiresAt * 1000);
    const wait = Math.max(LEASE_RETRY_MS, free - now);
    if (wait > LEASE_HANDOVER_WAIT_MS || now + wait >= end) return taken;
    await sleep(wait);
  }
}

type Opened = { readonly kind: 'open'; readonly session: ScaleSetSession; readonly state: LeaseState } | { readonly kind: 'conflict' } | { readonly kind: 'lease-lost' };

/**
 * The session the last holder left open, refreshed (a fresh queue token); a new one when it
 * is gone or was another scale set's. A session found gone is deleted (best effort: the
 * refusal may have been about something else) and dropped from the lease item before the
 * create, so a create that fails leaves no gone session named for the next holder. A conflict
 * on create means a session outside the lease (a holder that crashed before it recorded its
 * new session, or another poller): nothing until the next invocation, never spun on. A
 * session the lease names cannot be the one in conflict: its refresh just said it is gone.
 * A new session is recorded in the lease at once, so a crash right after leaves its id for
 * the next holder.
 */
async function openSession(deps: PollDeps, lease: Lease, state: LeaseState, scaleSetId: number, log: Logger): Promise<Opened> {
  if (state.sessionId !== undefined && state.scaleSetId === scaleSetId) {
    try {
      const session = await deps.api.refreshSession(scaleSetId, state.sessionId);
      return { kind: 'open', session, state };
    } catch (error) {
      if (!(error instanceof SessionGoneError)) throw error;
      log.info('the session left open is gone; creating a new one', { sessionId: state.sessionId });
      await deps.api.deleteSession(scaleSetId, state.sessionId).catch(() => undefined);
    }
  }
  if (state.sessionId !== undefined) {
    const { sessionId: _gone, ...rest } = state;
    state = rest;
    const r = await deps.leases.record(lease, state, ['sessionId']);
    if (r === 'lost') return { kind: 'lease-lost' };
    if (r !== 'done') log.warn('dropping the gone session from the lease failed', { error: r.error });
  }
  let session: ScaleSetSession;
  try {
    session = await deps.api.createSession(scaleSetId, deps.holder);
  } catch (error) {
    if (!(error instanceof SessionConflictError)) throw error;
    log.warn('another message session is active: nothing until the next invocation', { scaleSetId });
    return { kind: 'conflict' };
  }
  // A new session starts from the scale set's current statistics: no earlier message id holds.
  const fresh: LeaseState = { ...state, sessionId: session.sessionId, scaleSetId, lastMessageId: 0 };
  const r = await deps.leases.record(lease, fresh);
  if (r === 'lost') {
    // Not ours to keep: the new holder finds a conflict and deletes nothing it does not know of,
    // so delete it here.
    await deps.api.deleteSession(scaleSetId, session.sessionId).catch(() => undefined);
    return { kind: 'lease-lost' };
  }
  if (r !== 'done') log.warn('recording the new session in the lease failed', { error: r.error });
  return { kind: 'open', session, state: fresh };
}

/**
 * The long-poll loop, until the deadline less the margin. `run.state` follows what the lease
 * item should say; `run.capacityUnknown` is set when a demand's invocation failed.
 */
async function listen(deps: PollDeps, lease: Lease, pool: PoolConfig, first: ScaleSetSession, run: Run, log: Logger): Promise<PollOutcome> {
  let session = first;
  let last = run.state.lastMessageId ?? 0;
  let messages = 0;
  let demands = 0;
  let reopened = false;
  const end = deps.deadline.getTime() - deps.marginMs;
  const stop = (why: string): PollOutcome => ({ kind: 'polled', messages, demands, stopped: why });
  const leaseLost = (): PollOutcome => {
    log.warn('the scale-set lease was lost: this poller stops');
    return { kind: 'lease-lost', messages };
  };
  /**
   * Renews the lease for the call that follows: when it now runs out (epoch ms, as written, in
   * whole seconds), or the outcome that stops the poller (lost, or undecided: another poller may
   * hold it now, so this one stops rather than call beside it).
   */
  const renewLease = async (before: string): Promise<number | PollOutcome> => {
    const expiry = leaseExpiry(deps);
    const renewed = await deps.leases.renew(lease, expiry);
    if (renewed === 'lost') return leaseLost();
    if (renewed !== 'done') {
      log.warn(`renewing the scale-set lease ${before} failed: this poller stops`, { error: renewed.error });
      return stop('renew-failed');
    }
    return Math.floor(expiry.getTime() / 1000) * 1000;
  };
  /**
   * Asks scale-up for the reading's capacity, under a lease renewed right before: whatever the
   * job events or the session's opening took, the lease covers the whole call, so no next
   * holder's demand runs beside it. Throws `Stopped` when it may not be sent (too little time
   * left, the lease lost or undecided) or the lease was lost after it. What a demand left
   * unserved is asked for again at once, while the last demand started something (never a spin
   * on a shortfall scale-up cannot serve now), at most `MAX_DEMANDS_PER_READING` times.
   */
  const demand = async (statistics: ScaleSetStatistics): Promise<void> => {
    for (let n = 1; ; n++) {
      const r = await demandOnce(statistics);
      if (r.unserved === 0 || r.started === 0 || n >= MAX_DEMANDS_PER_READING) return;
    }
  };
  const demandOnce = async (statistics: ScaleSetStatistics): Promise<ScaleSetDemandResult> => {
    if (deps.deadline.getTime() - deps.now().getTime() < (deps.demandBoundMs ?? DEMAND_BOUND_MS)) throw new Stopped(stop('no-time-for-demand'));
    const expiry = await renewLease('before a demand');
    if (typeof expiry !== 'number') throw new Stopped(expiry);
    // The time left was judged before the renewal, and the expiry is capped at the deadline: a
    // slow renewal (a lost answer read back and sent again) can leave the lease shorter than
    // scale-up's bound, and a demand sent then could run on beside the next holder's.
    const covered = expiry - deps.now().getTime();
    if (covered < demandCallMs(deps)) {
      log.warn('the renewal before a demand left the lease shorter than scale-up\'s bound: no demand, the message is left for the next poller', { coveredMs: covered });
      throw new Stopped(stop('lease-short-for-demand'));
    }
    const carried = recent(run.state.recentlyStarted, deps.now());
    const d: ScaleSetDemand = {
      kind: 'scale-set-demand',
      pool: pool.name,
      scaleSetId: session.scaleSetId,
      assignedJobs: statistics.totalAssignedJobs,
      traceId: deps.traceId(),
      ...(carried.length > 0 ? { recentlyStarted: carried } : {}),
    };
    let result: ScaleSetDemandResult;
    try {
      result = await deps.requestCapacity(d);
    } catch (error) {
      // Scale-up may have run and started runners it could not report: held after the poll. A
      // refusal (throttled, denied) means it never ran: nothing to wait out.
      if (!demandRefused(error)) run.capacityUnknown = true;
      throw error;
    }
    demands++;
    if (result.started > 0 || result.unserved > 0) log.info('scale-set demand served', { traceId: d.traceId, assignedJobs: d.assignedJobs, observed: result.observed, started: result.started, unserved: result.unserved });
    const started = result.startedRunners ?? [];
    if (started.length === 0) return result;
    // Kept in memory and in the lease item, so the next demand (this holder's or the next one's)
    // counts them while EC2's reads may not show them yet.
    run.state = { ...run.state, recentlyStarted: recent([...carried, ...started], deps.now()) };
    const r = await deps.leases.record(lease, run.state);
    if (r === 'lost') throw new Stopped(leaseLost());
    if (r !== 'done') log.warn('recording the runners started in the lease failed', { error: r.error });
    return result;
  };

  // The session's statistics first, as the client's listener does (listener.go `Run`): a runner
  // lost since the last reading is replaced without waiting for a message. A session answered
  // without them waits for the first message.
  /** A session's reading served before its first poll: the outcome that ends the poll, or undefined to poll on. */
  const serveOpening = async (reading: ScaleSetStatistics): Promise<PollOutcome | undefined> => {
    try {
      await demand(reading);
      return undefined;
    } catch (error) {
      if (error instanceof Stopped) return error.outcome;
      log.error('asking scale-up for capacity failed', { error: errorName(error) });
      return stop('demand-failed');
    }
  };
  let statistics = session.statistics;
  if (statistics !== undefined) {
    const o = await serveOpening(statistics);
    if (o) return o;
  }
  /**
   * The first message after the session's opening may be one an earlier holder was handed and
   * never acknowledged (its lease lost, its acknowledgement lost): delivered again, it carries the
   * statistics of when it was made, older than the session's reading just served, and a demand on
   * them would start runners for jobs completed since (the loopback models this; the client's
   * source does not say a redelivery's statistics are recomputed). A refresh answers the
   * statistics now (one request per holding that gets a message). A session it finds gone is
   * reopened as one gone mid-poll; any other failure serves no demand for the message, and the
   * reading stays owed: each empty poll asks for it again before any demand (the opening's reading
   * may be older than the message), until one comes or a later message brings its own. A refresh
   * answered without statistics falls back to the message's (the only reading there is).
   */
  let firstMessage = true;
  /** The statistics of a first message whose fresh reading failed: asked for again at each empty poll, until a reading or a later message. */
  let owed: ScaleSetStatistics | undefined;
  type Reading = { readonly kind: 'fresh'; readonly session: ScaleSetSession; readonly statistics: ScaleSetStatistics } | { readonly kind: 'gone' } | { readonly kind: 'failed' };
  const freshReading = async (current: ScaleSetSession, carried: ScaleSetStatistics): Promise<Reading> => {
    try {
      const fresh = await deps.api.refreshSession(current.scaleSetId, current.sessionId);
      return { kind: 'fresh', session: fresh, statistics: fresh.statistics ?? carried };
    } catch (error) {
      if (error instanceof SessionGoneError) return { kind: 'gone' };
      log.warn('refreshing the session for a fresh reading failed: no demand for this message', { error: errorName(error) });
      return { kind: 'failed' };
    }
  };
  /**
   * A session found gone mid-poll: a new one (the same one when the 404 was not its end), its
   * reading served before its first poll. Once per invocation: a session gone again at once is
   * not cured by another create. Returns the outcome that ends the poll, or undefined to poll on.
   */
  const reopen = async (): Promise<PollOutcome | undefined> => {
    if (reopened) {
      log.warn('the new message session is gone too: the next invocation creates one', { sessionId: session.sessionId });
      return stop('session-gone');
    }
    reopened = true;
    log.warn('the message session is gone mid-poll: creating a new one', { sessionId: session.sessionId });
    const opened = await openSession(deps, lease, run.state, session.scaleSetId, log);
    if (opened.kind === 'lease-lost') return { kind: 'lease-lost', messages };
    if (opened.kind === 'conflict') return stop('session-conflict');
    // The same session refreshed (the 404 was not its end) goes on after the same message.
    if (opened.session.sessionId !== session.sessionId) last = 0;
    session = opened.session;
    firstMessage = true;
    owed = undefined;
    run.state = opened.state;
    // The new session's statistics are the freshest reading: served before its first poll.
    if (session.statistics !== undefined) {
      statistics = session.statistics;
      return serveOpening(statistics);
    }
    return undefined;
  };
  let refreshed = false;
  while (deps.now().getTime() < end) {
    const expiry = await renewLease('before a poll');
    if (typeof expiry !== 'number') return expiry;
    // A poll never outlives the lease: one a slow renewal left short ends at the expiry, and the
    // next renewal follows (the window's end is the only end of the loop).
    const until = Math.min(end, expiry);
    const signal = AbortSignal.timeout(Math.max(1, until - deps.now().getTime()));
    let message;
    try {
      message = await deps.api.getMessage(session, last, pool.maxRunners, signal);
    } catch (error) {
      if (signal.aborted) {
        if (until < end) continue;
        break;
      }
      if (error instanceof QueueTokenExpiredError && !refreshed) {
        // Once in a row: a token that expires again at once is not cured by another refresh.
        refreshed = true;
        session = await deps.api.refreshSession(session.scaleSetId, session.sessionId);
        continue;
      }
      if (error instanceof SessionGoneError) {
        const o = await reopen();
        if (o) return o;
        continue;
      }
      throw error;
    }
    refreshed = false;
    // The poll window ended (the client answers an aborted poll as no message): no demand for it.
    if (message === undefined && signal.aborted) {
      if (until < end) continue;
      break;
    }
    // The message's reading: none when a fresh one could not be had for the first message.
    let reading: ScaleSetStatistics | undefined;
    if (message !== undefined) {
      messages++;
      if (firstMessage) {
        firstMessage = false;
        const fresh = await freshReading(session, message.statistics);
        if (fresh.kind === 'gone') {
          // Left unacknowledged (its session is gone): the new session's reading is served instead.
          const o = await reopen();
          if (o) return o;
          continue;
        }
        if (fresh.kind === 'fresh') {
          session = fresh.session;
          statistics = reading = fresh.statistics;
        } else owed = message.statistics;
      } else {
        owed = undefined;
        statistics = reading = message.statistics;
      }
    }
    try {
      if (message === undefined) {
        if (owed !== undefined) {
          // The first message's fresh reading is still owed: the opening's reading it may have
          // superseded is not served again (it could ask for completed jobs' runners or miss a new one).
          const fresh = await freshReading(session, owed);
          if (fresh.kind === 'gone') {
            const o = await reopen();
            if (o) return o;
            continue;
          }
          if (fresh.kind === 'failed') continue;
          owed = undefined;
          session = fresh.session;
          statistics = fresh.statistics;
        }
        // No message (202): the last statistics still say what is wanted; a runner lost since
        // (terminated, failed to start) is replaced now, not at the next message.
        if (statistics !== undefined) await demand(statistics);
        continue;
      }
      if (message.events.length > 0) await deps.jobEvents(pool, message.events);
      if (reading !== undefined) await demand(reading);
    } catch (error) {
      // Not acknowledged: GitHub delivers the message again, to the next invocation.
      if (error instanceof Stopped) return error.outcome;
      log.error('handling a scale-set message failed: left unacknowledged for the next poller', { messageId: message?.messageId, error: errorName(error) === 'Error' ? (error as Error).message : errorName(error) });
      return stop('handling-failed');
    }
    session = await acknowledge(deps, session, message.messageId);
    last = message.messageId;
    run.state = { ...run.state, sessionId: session.sessionId, scaleSetId: session.scaleSetId, lastMessageId: last };
    const r = await deps.leases.record(lease, run.state);
    if (r === 'lost') return leaseLost();
    if (r !== 'done') log.warn('recording the last message id failed; the next holder may be handed the message again', { error: r.error });
  }
  return { kind: 'polled', messages, demands };
}

/** A demand that ended the poll before or after it was sent: the outcome to return (the message is not acknowledged). */
class Stopped extends Error {
  constructor(readonly outcome: PollOutcome) {
    super('the poll stopped');
  }
}

/** Deletes (acknowledges) a handled message; an expired token is refreshed once. Returns the session in use. */
async function acknowledge(deps: PollDeps, session: ScaleSetSession, messageId: number): Promise<ScaleSetSession> {
  try {
    await deps.api.deleteMessage(session, messageId);
    return session;
  } catch (error) {
    if (!(error instanceof QueueTokenExpiredError)) throw error;
  }
  const fresh = await deps.api.refreshSession(session.scaleSetId, session.sessionId);
  await deps.api.deleteMessage(fresh, messageId);
  return fresh;
}
