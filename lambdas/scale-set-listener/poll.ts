import {
  QueueTokenExpiredError,
  SessionConflictError,
  SessionGoneError,
  type PoolConfig,
  type ScaleSetApi,
  type ScaleSetDemand,
  type ScaleSetDemandResult,
  type ScaleSetJobEvent,
  type PoolScaleSetConfig,
  type ScaleSetSession,
  type ScaleSetStatistics,
} from '../shared/contract';
import { errorName } from '../shared/aws-call';
import type { Logger } from '../shared/log';
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
  /** When the invocation must be done (its timeout less a reserve): the lease's expiry. */
  readonly deadline: Date;
  /** The last poll ends this long before the deadline, leaving time to hand a message on and release. */
  readonly marginMs: number;
  readonly now: () => Date;
  readonly log: Logger;
  /** Marks runners busy and finished for scale-down (jobs.ts). Throws when it could not. */
  readonly jobEvents: (pool: PoolConfig, events: readonly ScaleSetJobEvent[]) => Promise<void>;
  /** Scale-up's synchronous invocation. Throws when it could not be asked. */
  readonly requestCapacity: (demand: ScaleSetDemand) => Promise<ScaleSetDemandResult>;
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
  // What the lease item says at the end: the session left open and the last message acknowledged.
  let state: LeaseState = taken.state;
  let lost = false;
  try {
    const found = await deps.api.findScaleSet(pool.scaleSet.name, pool.scaleSet.runnerGroup);
    if (!found) return { kind: 'no-scale-set' };
    const opened = await openSession(deps, lease, state, found.id, log);
    if (opened.kind !== 'open') {
      lost = opened.kind === 'lease-lost';
      return opened.kind === 'lease-lost' ? { kind: 'lease-lost', messages: 0 } : opened;
    }
    state = opened.state;
    const run = await listen(deps, lease, pool, opened.session, state, log);
    state = run.state;
    lost = run.outcome.kind === 'lease-lost';
    return run.outcome;
  } catch (error) {
    return { kind: 'failed', error: errorName(error) === 'Error' ? (error as Error).message : errorName(error) };
  } finally {
    // A lost lease is someone else's now: nothing of it is ours to write.
    if (!lost) {
      const r = await deps.leases.release(lease, state);
      if (r !== 'done') log.warn('releasing the scale-set lease failed; it frees at its expiry', { outcome: typeof r === 'string' ? r : r.error });
    }
  }
}

/**
 * The lease, or the answer that another holder has it. A holder stops polling `marginMs`
 * before its expiry and then releases: an invocation that finds it held with that moment
 * at most `LEASE_HANDOVER_WAIT_MS` away waits for it (and asks every `LEASE_RETRY_MS` after
 * it), so the scale set is polled on without the gap of a schedule period. A bounded wait,
 * never a spin; a crashed holder's lease is taken once its expiry has passed.
 */
async function takeLease(deps: PollDeps, pool: string): Promise<AcquireOutcome> {
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const end = deps.deadline.getTime() - deps.marginMs;
  for (;;) {
    const taken = await deps.leases.acquire(pool, deps.holder, deps.deadline, deps.now());
    if (taken.kind !== 'held' || taken.expiresAt === undefined) return taken;
    const now = deps.now().getTime();
    const wait = Math.max(LEASE_RETRY_MS, taken.expiresAt * 1000 - deps.marginMs - now);
    if (wait > LEASE_HANDOVER_WAIT_MS || now + wait >= end) return taken;
    await sleep(wait);
  }
}

type Opened = { readonly kind: 'open'; readonly session: ScaleSetSession; readonly state: LeaseState } | { readonly kind: 'conflict' } | { readonly kind: 'lease-lost' };

/**
 * The session the last holder left open, refreshed (a fresh queue token); a new one when it
 * is gone or was another scale set's. A conflict means a session of ours outlived its
 * holder's lease (a crash after create, before the lease recorded it? then the item names
 * none) or another poller outside the lease: when the lease item names a session, that one
 * is deleted and a session created once more; otherwise, or on a second conflict, nothing
 * until the next invocation (never spun on). A new session is recorded in the lease at once,
 * so a crash right after leaves its id for the next holder to delete.
 */
async function openSession(deps: PollDeps, lease: Lease, state: LeaseState, scaleSetId: number, log: Logger): Promise<Opened> {
  if (state.sessionId !== undefined && state.scaleSetId === scaleSetId) {
    try {
      const session = await deps.api.refreshSession(scaleSetId, state.sessionId);
      return { kind: 'open', session, state };
    } catch (error) {
      if (!(error instanceof SessionGoneError)) throw error;
      log.info('the session left open is gone; creating a new one', { sessionId: state.sessionId });
    }
  }
  let session: ScaleSetSession;
  try {
    session = await deps.api.createSession(scaleSetId, deps.holder);
  } catch (error) {
    if (!(error instanceof SessionConflictError)) throw error;
    if (state.sessionId === undefined) {
      log.warn('another message session is active and the lease names none: nothing until the next invocation', { scaleSetId });
      return { kind: 'conflict' };
    }
    log.warn('another message session is active: deleting the one the lease names and creating again, once', { scaleSetId, sessionId: state.sessionId });
    await deps.api.deleteSession(scaleSetId, state.sessionId);
    try {
      session = await deps.api.createSession(scaleSetId, deps.holder);
    } catch (again) {
      if (!(again instanceof SessionConflictError)) throw again;
      log.warn('the message session is still in conflict: nothing until the next invocation', { scaleSetId });
      return { kind: 'conflict' };
    }
  }
  // A new session starts from the scale set's current statistics: no earlier message id holds.
  const fresh: LeaseState = { sessionId: session.sessionId, scaleSetId, lastMessageId: 0 };
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

interface Listened {
  readonly outcome: PollOutcome;
  readonly state: LeaseState;
}

/** The long-poll loop, until the deadline less the margin. */
async function listen(deps: PollDeps, lease: Lease, pool: PoolConfig, first: ScaleSetSession, start: LeaseState, log: Logger): Promise<Listened> {
  let session = first;
  let state = start;
  let last = start.lastMessageId ?? 0;
  let messages = 0;
  let demands = 0;
  const end = deps.deadline.getTime() - deps.marginMs;
  const stop = (why: string): Listened => ({ outcome: { kind: 'polled', messages, demands, stopped: why }, state });
  const demand = async (statistics: ScaleSetStatistics): Promise<void> => {
    const d: ScaleSetDemand = { kind: 'scale-set-demand', pool: pool.name, scaleSetId: session.scaleSetId, assignedJobs: statistics.totalAssignedJobs, traceId: deps.traceId() };
    const result = await deps.requestCapacity(d);
    demands++;
    if (result.started > 0 || result.unserved > 0) log.info('scale-set demand served', { traceId: d.traceId, assignedJobs: d.assignedJobs, ...result });
  };

  // The session's statistics first, as the client's listener does (listener.go `Run`): a runner
  // lost since the last reading is replaced without waiting for a message.
  let statistics = session.statistics;
  try {
    await demand(statistics);
  } catch (error) {
    log.error('asking scale-up for capacity failed', { error: errorName(error) });
    return stop('demand-failed');
  }
  let refreshed = false;
  while (deps.now().getTime() < end) {
    const renewed = await deps.leases.renew(lease, deps.deadline);
    if (renewed === 'lost') {
      log.warn('the scale-set lease was lost: this poller stops');
      return { outcome: { kind: 'lease-lost', messages }, state };
    }
    if (renewed !== 'done') {
      // Undecided: another poller may hold it now; stop rather than poll beside it.
      log.warn('renewing the scale-set lease failed: this poller stops', { error: renewed.error });
      return stop('renew-failed');
    }
    const signal = AbortSignal.timeout(Math.max(1, end - deps.now().getTime()));
    let message;
    try {
      message = await deps.api.getMessage(session, last, pool.maxRunners, signal);
    } catch (error) {
      if (signal.aborted) break;
      if (error instanceof QueueTokenExpiredError && !refreshed) {
        // Once in a row: a token that expires again at once is not cured by another refresh.
        refreshed = true;
        session = await deps.api.refreshSession(session.scaleSetId, session.sessionId);
        continue;
      }
      if (error instanceof SessionGoneError) {
        log.warn('the message session is gone: the next invocation creates one', { sessionId: session.sessionId });
        return stop('session-gone');
      }
      throw error;
    }
    refreshed = false;
    // The poll window ended (the client answers an aborted poll as no message): no demand for it.
    if (message === undefined && signal.aborted) break;
    try {
      if (message === undefined) {
        // No message (202): the last statistics still say what is wanted; a runner lost since
        // (terminated, failed to start) is replaced now, not at the next message.
        await demand(statistics);
        continue;
      }
      messages++;
      statistics = message.statistics;
      if (message.events.length > 0) await deps.jobEvents(pool, message.events);
      await demand(statistics);
    } catch (error) {
      // Not acknowledged: GitHub delivers the message again, to the next invocation.
      log.error('handling a scale-set message failed: left unacknowledged for the next poller', { messageId: message?.messageId, error: errorName(error) === 'Error' ? (error as Error).message : errorName(error) });
      return stop('handling-failed');
    }
    session = await acknowledge(deps, session, message.messageId);
    last = message.messageId;
    state = { ...state, sessionId: session.sessionId, scaleSetId: session.scaleSetId, lastMessageId: last };
    const r = await deps.leases.record(lease, state);
    if (r === 'lost') {
      log.warn('the scale-set lease was lost: this poller stops');
      return { outcome: { kind: 'lease-lost', messages }, state };
    }
    if (r !== 'done') log.warn('recording the last message id failed; the next holder may be handed the message again', { error: r.error });
  }
  return { outcome: { kind: 'polled', messages, demands }, state };
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
