import { beforeEach, describe, expect, it } from 'vitest';
import type { AcquireOutcome, HeldOutcome, Lease, LeaseField, LeaseState, LeaseTimes, ScaleSetLeases } from '../../lambdas/scale-set-listener/lease';
import { CAPACITY_CALL, ScaleUpInvokeError } from '../../lambdas/scale-set-listener/capacity';
import { LEASE_TERM_MS, MAX_DEMANDS_PER_READING, pollScaleSet, type PollDeps } from '../../lambdas/scale-set-listener/poll';
import { type PoolConfig, type ScaleSetDemand, type PoolScaleSetConfig } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { FakeScaleSet } from '../support/fake-scale-set';
import { fleetConfig } from '../support/fixtures';
import { scaled } from '../support/slowdown';

/**
 * The poll loop's recoveries, with an in-memory lease (the DynamoDB one is tested against moto
 * in lease.test.ts) and the in-memory scale set service. Time is a counter each empty poll
 * moves on, so a poll window ends after a few empty polls.
 */

const POOL: PoolConfig & { scaleSet: PoolScaleSetConfig } = { ...fleetConfig().pools[0]!, scaleSet: { name: 'linux-set', runnerGroup: 'Default' } };

/** One lease item, written under the same conditions as the DynamoDB lease. */
class MemoryLeases implements ScaleSetLeases {
  item: { holder?: string; expiresAt: number; releaseAt?: number } & LeaseState = { expiresAt: 0 };
  /** Every state written (record and release), in order. */
  writes: LeaseState[] = [];
  acquire(pool: string, holder: string, times: LeaseTimes, now: Date): Promise<AcquireOutcome> {
    if (this.item.holder !== undefined && this.item.holder !== holder && this.item.expiresAt >= now.getTime() / 1000) {
      return Promise.resolve({ kind: 'held', holder: this.item.holder, expiresAt: this.item.expiresAt, ...(this.item.releaseAt === undefined ? {} : { releaseAt: this.item.releaseAt }) });
    }
    const lease = { pool, holder, expiresAt: Math.floor(times.expiresAt.getTime() / 1000) };
    this.item = { ...this.item, holder, expiresAt: lease.expiresAt, releaseAt: Math.floor(times.releaseAt.getTime() / 1000) };
    const { sessionId, scaleSetId, lastMessageId, recentlyStarted } = this.item;
    return Promise.resolve({
      kind: 'acquired',
      lease,
      state: { ...(sessionId ? { sessionId } : {}), ...(scaleSetId ? { scaleSetId } : {}), ...(lastMessageId !== undefined ? { lastMessageId } : {}), ...(recentlyStarted ? { recentlyStarted } : {}) },
    });
  }
  renew(lease: Lease, expiresAt: Date): Promise<HeldOutcome> {
    if (this.item.holder !== lease.holder) return Promise.resolve('lost');
    this.item = { ...this.item, expiresAt: Math.floor(expiresAt.getTime() / 1000) };
    return Promise.resolve('done');
  }
  record(lease: Lease, state: LeaseState, remove: readonly LeaseField[] = []): Promise<HeldOutcome> {
    if (this.item.holder !== lease.holder) return Promise.resolve('lost');
    const item: Record<string, unknown> = { ...this.item, ...state };
    for (const f of remove) delete item[f];
    this.item = item as unknown as typeof this.item;
    this.writes.push({ ...state });
    return Promise.resolve('done');
  }
  release(lease: Lease, state: LeaseState, holdUntil?: Date): Promise<HeldOutcome> {
    if (this.item.holder !== lease.holder) return Promise.resolve('lost');
    this.writes.push({ ...state });
    if (holdUntil !== undefined) {
      const until = Math.floor(holdUntil.getTime() / 1000);
      this.item = { ...this.item, ...state, expiresAt: until, releaseAt: until };
    } else this.item = { ...this.item, ...state, holder: undefined, expiresAt: 0 };
    return Promise.resolve('done');
  }
}

let api: FakeScaleSet;
let leases: MemoryLeases;
let demands: ScaleSetDemand[];
let setId: number;
let clock: number;
beforeEach(() => {
  api = new FakeScaleSet();
  api.emptyWaitMs = 1;
  leases = new MemoryLeases();
  demands = [];
  setId = api.sets.get('linux-set')!;
  clock = Date.parse('2026-12-06T12:00:00Z');
});

function deps(overrides: Partial<PollDeps> = {}): PollDeps {
  const start = clock;
  return {
    api,
    leases,
    holder: `holder-${start}`,
    // The listener's margin (two minutes): a demand is sent only with scale-up's bound left.
    deadline: new Date(start + 180_000),
    marginMs: 120_000,
    // Every reading of the clock moves it on a little: the window ends after a bounded number of steps.
    now: () => new Date((clock += 1_000)),
    log: createLogger({}, () => {}),
    jobEvents: async () => {},
    requestCapacity: async (d) => {
      demands.push(d);
      return { observed: 0, started: 0, unserved: 0 };
    },
    traceId: () => `trace-${demands.length}`,
    sleep: async () => {},
    ...overrides,
  };
}

/** The number of demands sent before each acknowledgement (the fake's deleteMessage, recorded). */
function acksAfterDemands(): number[] {
  const acked: number[] = [];
  const realDelete = api.deleteMessage.bind(api);
  api.deleteMessage = async (session, id) => {
    acked.push(demands.length);
    return realDelete(session, id);
  };
  return acked;
}

/** A poll as the next invocation runs it: a fresh holder, from the lease item's state. */
async function invocation(overrides: Partial<PollDeps> = {}) {
  clock += 200_000;
  return pollScaleSet(deps(overrides), POOL);
}

describe('the scale-set poll loop', () => {
  it('acknowledges a message only after its demand was served, and records it in the lease', async () => {
    const m = api.push(setId, 3);
    // The session's own reading differs from the message's, so the message's demand is told apart.
    api.sessionAssigned = 1;
    const order: string[] = [];
    // Then the scale set's state moves on to the message's reading (a job assigned after the open): the refresh before the message's demand answers it.
    const realGet = api.getMessage.bind(api);
    api.getMessage = (session, last, max, signal) => {
      delete api.sessionAssigned;
      return realGet(session, last, max, signal);
    };
    const realDelete = api.deleteMessage.bind(api);
    api.deleteMessage = async (session, id) => {
      order.push(`ack:${id}`);
      return realDelete(session, id);
    };
    const o = await invocation({
      requestCapacity: async (d) => {
        order.push(`demand:${d.assignedJobs}:${api.acknowledged.has(m)}`);
        demands.push(d);
        return { observed: 0, started: 0, unserved: 0 };
      },
    });
    expect(o.kind).toBe('polled');
    // The session's reading, the message's demand before its acknowledgement, then the empty polls' (the message's reading again).
    expect(order.slice(0, 3)).toEqual(['demand:1:false', 'demand:3:false', `ack:${m}`]);
    expect(new Set(order.slice(3))).toEqual(new Set(['demand:3:true']));
    expect(api.acknowledged.has(m)).toBe(true);
    expect(leases.item.lastMessageId).toBe(m);
    expect(leases.item.holder).toBeUndefined();
    // The session stays open for the next invocation.
    expect(api.active.get(setId)?.sessionId).toBe(leases.item.sessionId);
  });

  it("a message an earlier holder left unacknowledged carries the statistics of when it was made: its demand is the scale set's reading now, not the old one", async () => {
    // Made when 3 jobs were assigned; 2 of them completed while it waited (its holder lost the lease before acknowledging it).
    const m = api.push(setId, 3);
    api.sessionAssigned = 1;
    const o = await invocation();
    expect(o.kind).toBe('polled');
    expect(api.acknowledged.has(m)).toBe(true);
    // An old reading of 3 would start two runners for jobs that are done: each surplus (the --scale-set seeds 1 and 2 showed it).
    expect(demands.length).toBeGreaterThan(1);
    expect(new Set(demands.map((d) => d.assignedJobs))).toEqual(new Set([1]));
  });

  it("the fresh reading's refresh failing (not a gone session) sends no demand on the message's own old statistics (review R6a)", async () => {
    const m = api.push(setId, 3);
    api.sessionAssigned = 1;
    api.refreshSession = async () => {
      throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
    };
    const o = await invocation();
    expect(o.kind).toBe('polled');
    // The session's reading (1) only: the message's 3 would start runners for jobs done since.
    expect(demands.length).toBeGreaterThan(0);
    expect(new Set(demands.map((d) => d.assignedJobs))).toEqual(new Set([1]));
    // Its job events are handled and it is acknowledged: the next message or empty poll asks again.
    expect(api.acknowledged.has(m)).toBe(true);
  });

  it('a failed fresh reading stays owed: the empty polls after it ask for it again before any demand, never serving the reading it may have superseded (review R7)', async () => {
    // A new message: a job assigned since the opening's reading (1).
    api.push(setId, 2);
    api.sessionAssigned = 1;
    const realRefresh = api.refreshSession.bind(api);
    let failNext = true;
    api.refreshSession = async (scaleSetId, sessionId) => {
      if (failNext) {
        failNext = false;
        api.sessionAssigned = 2;
        throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
      }
      return realRefresh(scaleSetId, sessionId);
    };
    const o = await invocation();
    expect(o.kind).toBe('polled');
    // The opening's 1, then only the fresh 2 (an empty poll's demand on the opening's 1 would miss the new job).
    const asked = demands.map((d) => d.assignedJobs);
    expect(asked[0]).toBe(1);
    expect(asked.slice(1).length).toBeGreaterThan(0);
    expect(new Set(asked.slice(1))).toEqual(new Set([2]));
  });

  it('the fresh reading finding the session gone reopens it as mid-poll, serves the new reading and leaves the message unacknowledged until then (review R6a)', async () => {
    const m = api.push(setId, 3);
    api.sessionAssigned = 1;
    const realRefresh = api.refreshSession.bind(api);
    let first = true;
    api.refreshSession = async (scaleSetId, sessionId) => {
      if (first) {
        // GitHub ended the session between the message and the refresh.
        first = false;
        await api.deleteSession(scaleSetId, sessionId);
      }
      return realRefresh(scaleSetId, sessionId);
    };
    const acked = acksAfterDemands();
    const o = await invocation();
    expect(o.kind).toBe('polled');
    expect(api.calls.filter((c) => c === 'createSession')).toHaveLength(2);
    // Never the message's old 3; the new session's reading was served before the message was acknowledged (on the new session).
    expect(new Set(demands.map((d) => d.assignedJobs))).toEqual(new Set([1]));
    expect(acked[0]).toBeGreaterThanOrEqual(2);
    expect(api.acknowledged.has(m)).toBe(true);
    expect(leases.item.sessionId).toBe(api.active.get(setId)?.sessionId);
  });

  it('a crash between reading a message and acting on it leaves the message for the next invocation, which serves it', async () => {
    const m = api.push(setId, 2);
    let asked = 0;
    const crashed = await invocation({
      // The session's own reading is served; the message's is not (the invocation dies there).
      requestCapacity: async (d) => {
        if (++asked === 2) throw new Error('scale-up did not answer');
        demands.push(d);
        return { observed: 0, started: 0, unserved: 0 };
      },
    });
    expect(crashed).toMatchObject({ kind: 'polled', stopped: 'handling-failed' });
    expect(api.acknowledged.has(m)).toBe(false);
    expect(leases.item.lastMessageId ?? 0).toBeLessThan(m);
    const next = await invocation();
    expect(next.kind).toBe('polled');
    expect(demands.map((d) => d.assignedJobs)).toContain(2);
    expect(api.acknowledged.has(m)).toBe(true);
  });

  it('a message delivered again after a lost acknowledgement is handled again, and acknowledged then', async () => {
    const m = api.push(setId, 4);
    const realDelete = api.deleteMessage.bind(api);
    let lost = true;
    api.deleteMessage = async (session, id) => {
      // The acknowledgement lands but its answer is lost: the caller hears an error.
      await realDelete(session, id);
      api.acknowledged.delete(id);
      if (lost) {
        lost = false;
        throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
      }
      api.acknowledged.add(id);
    };
    expect((await invocation()).kind).toBe('failed');
    const second = await invocation();
    expect(second.kind).toBe('polled');
    expect(demands.filter((d) => d.assignedJobs === 4).length).toBeGreaterThanOrEqual(2);
    expect(api.acknowledged.has(m)).toBe(true);
    expect(leases.item.lastMessageId).toBe(m);
  });

  it('after an empty poll (202) the last statistics are sent again, so a lost runner is replaced', async () => {
    api.push(setId, 5);
    await invocation();
    const before = demands.length;
    await invocation();
    // The session's statistics, then one per empty poll: all of them the last reading's 5.
    expect(demands.length).toBeGreaterThan(before + 1);
    expect(new Set(demands.slice(before).map((d) => d.assignedJobs))).toEqual(new Set([5]));
  });

  it('an expired queue token is refreshed once and the poll goes on', async () => {
    const first = api.push(setId, 1);
    await invocation();
    const m = api.push(setId, 2);
    const realGet = api.getMessage.bind(api);
    let expired = false;
    api.getMessage = (session, last, max, signal) => {
      if (!expired) {
        expired = true;
        api.expireToken(setId);
      }
      return realGet(session, last, max, signal);
    };
    api.calls.length = 0;
    const o = await invocation();
    expect(o.kind).toBe('polled');
    expect(api.acknowledged.has(first) && api.acknowledged.has(m)).toBe(true);
    // The resume's refresh, one for the expired token, one for a fresh reading with the first message.
    expect(api.calls.filter((c) => c === 'refreshSession')).toHaveLength(3);
  });

  it('a token that expires again at once is not refreshed in a loop', async () => {
    api.push(setId, 1);
    const realGet = api.getMessage.bind(api);
    api.getMessage = (session, last, max, signal) => {
      api.expireToken(setId);
      return realGet(session, last, max, signal);
    };
    const o = await invocation();
    expect(o.kind).toBe('failed');
    expect(api.calls.filter((c) => c === 'refreshSession')).toHaveLength(1);
    expect(leases.item.holder).toBeUndefined();
  });

  it('a session conflict the lease cannot explain is not spun on: nothing until the next invocation', async () => {
    await api.createSession(setId, 'someone-else');
    api.calls.length = 0;
    const o = await invocation();
    expect(o.kind).toBe('conflict');
    expect(api.calls.filter((c) => c === 'createSession')).toHaveLength(1);
    expect(api.calls).not.toContain('deleteSession');
    expect(api.calls).not.toContain('getMessage');
    expect(leases.item.holder).toBeUndefined();
  });

  it('a session the lease names that is gone is deleted (best effort) and dropped from the lease before a new one is created', async () => {
    api.push(setId, 1);
    await invocation();
    const gone = leases.item.sessionId!;
    api.active.delete(setId);
    api.push(setId, 2);
    const realCreate = api.createSession.bind(api);
    let named: string | undefined = 'not asked';
    api.createSession = async (id, owner) => {
      named = leases.item.sessionId;
      return realCreate(id, owner);
    };
    api.calls.length = 0;
    const o = await invocation();
    expect(o.kind).toBe('polled');
    expect(api.calls.slice(0, 4)).toEqual(['findScaleSet', 'refreshSession', 'deleteSession', 'createSession']);
    // The lease named no session when the create was sent: a create that failed would leave none gone named.
    expect(named).toBeUndefined();
    expect(leases.item.sessionId).not.toBe(gone);
  });

  it('a session that is gone mid-poll is replaced once within the invocation, and the poll goes on', async () => {
    api.push(setId, 1);
    await invocation();
    const realGet = api.getMessage.bind(api);
    let ended = false;
    api.getMessage = (session, last, max, signal) => {
      if (!ended) {
        // GitHub dropped the session (expired): this poll finds it gone; a message comes for the next.
        ended = true;
        api.active.delete(setId);
        api.push(setId, 2);
      }
      return realGet(session, last, max, signal);
    };
    api.calls.length = 0;
    const o = await invocation();
    expect(o).toMatchObject({ kind: 'polled', messages: 1 });
    expect((o as { stopped?: string }).stopped).toBeUndefined();
    expect(api.calls.filter((c) => c === 'createSession')).toHaveLength(1);
    expect(leases.item.sessionId).toBe(api.active.get(setId)?.sessionId);
  });

  it('a session gone again at once after its replacement ends the poll (no loop of creates)', async () => {
    api.push(setId, 1);
    await invocation();
    const realGet = api.getMessage.bind(api);
    api.getMessage = (session, last, max, signal) => {
      api.active.delete(setId);
      return realGet(session, last, max, signal);
    };
    api.calls.length = 0;
    const o = await invocation();
    expect(o).toMatchObject({ kind: 'polled', stopped: 'session-gone' });
    expect(api.calls.filter((c) => c === 'createSession')).toHaveLength(1);
  });

  it('a session answered without statistics sends no demand until the first message', async () => {
    api.sessionAssigned = 'none';
    const o = await invocation({ deadline: new Date(clock + 200_000 + 126_000) });
    expect(o.kind).toBe('polled');
    expect(demands).toEqual([]);
    api.push(setId, 2);
    await invocation();
    expect(demands.map((d) => d.assignedJobs)).toEqual(expect.arrayContaining([2]));
    expect(demands.every((d) => d.assignedJobs === 2)).toBe(true);
  });

  it('the runners a demand started go with the next demands (and into the lease item for the next holder) until they are 3 minutes old', async () => {
    api.push(setId, 2);
    let n = 0;
    const o = await invocation({
      requestCapacity: async (d) => {
        demands.push(d);
        // The first demand starts two runners; the later ones start none.
        return ++n === 1 ? { observed: 0, started: 2, unserved: 0, startedRunners: [{ instanceId: 'i-a', startedAt: new Date(clock).toISOString() }, { instanceId: 'i-b', startedAt: new Date(clock).toISOString() }] } : { observed: 2, started: 0, unserved: 0, startedRunners: [] };
      },
    });
    expect(o.kind).toBe('polled');
    expect(demands[0]!.recentlyStarted).toBeUndefined();
    expect(demands.length).toBeGreaterThan(1);
    for (const d of demands.slice(1)) expect(d.recentlyStarted?.map((r) => r.instanceId)).toEqual(['i-a', 'i-b']);
    expect(leases.item.recentlyStarted?.map((r) => r.instanceId)).toEqual(['i-a', 'i-b']);
    // The next holder, within the bound, carries them too.
    const before = demands.length;
    clock -= 200_000 - 30_000;
    await invocation();
    expect(demands[before]!.recentlyStarted?.map((r) => r.instanceId)).toEqual(['i-a', 'i-b']);
    // Past the bound they are no lag any more: dropped.
    const later = demands.length;
    await invocation();
    expect(demands[later]!.recentlyStarted).toBeUndefined();
  });

  it("a demand whose invocation failed keeps the lease until scale-up's timeout has passed, then hands it over", async () => {
    api.push(setId, 2);
    const failed = await invocation({
      requestCapacity: async () => {
        throw Object.assign(new Error('the invocation timed out'), { name: 'TimeoutError' });
      },
    });
    expect(failed).toMatchObject({ kind: 'polled', stopped: 'demand-failed' });
    const heldUntil = leases.item.expiresAt;
    expect(leases.item.holder).toBeDefined();
    // Scale-up's timeout and its cold start (the call's bound) from the release on.
    expect(heldUntil * 1000).toBeGreaterThanOrEqual(clock + CAPACITY_CALL.timeoutMs - 2_000);
    expect(heldUntil * 1000).toBeLessThanOrEqual(clock + CAPACITY_CALL.timeoutMs);
    // An invocation before that time (further off than the hand-over wait) finds it held.
    const slept: number[] = [];
    clock += 30_000;
    const next = await pollScaleSet(deps({ holder: 'next', sleep: async (ms) => void slept.push(ms) }), POOL);
    expect(next.kind).toBe('held');
    expect(slept).toEqual([]);
    clock = heldUntil * 1000 + 1_000;
    expect((await pollScaleSet(deps({ holder: 'after' }), POOL)).kind).toBe('polled');
  });
});

describe('a demand scale-up never ran (review R5)', () => {
  it('a refused invocation (throttled: 429) ends the poll as demand-failed and releases the lease at once: no hold', async () => {
    api.push(setId, 2);
    const o = await invocation({
      requestCapacity: async () => {
        throw Object.assign(new Error('Rate exceeded'), { name: 'TooManyRequestsException', $metadata: { httpStatusCode: 429 } });
      },
    });
    expect(o).toMatchObject({ kind: 'polled', stopped: 'demand-failed' });
    expect(leases.item.holder).toBeUndefined();
    // The next invocation polls at once (the message is still there for it).
    clock += 1_000;
    expect((await pollScaleSet(deps({ holder: 'next' }), POOL)).kind).toBe('polled');
  });

  it('a function error (scale-up ran; what it started went unreported) holds the lease as a lost answer does', async () => {
    api.push(setId, 2);
    const o = await invocation({
      requestCapacity: async () => {
        throw new ScaleUpInvokeError('Unhandled: boom');
      },
    });
    expect(o).toMatchObject({ kind: 'polled', stopped: 'demand-failed' });
    expect(leases.item.holder).toBeDefined();
    expect(leases.item.expiresAt * 1000).toBeGreaterThan(clock + CAPACITY_CALL.timeoutMs - 5_000);
  });
});

describe('the hand-over of the lease', () => {
  it('an invocation arriving shortly before the holder releases waits for it and takes over; an earlier one returns at once', async () => {
    const holderDeadline = clock + 300_000;
    // The holder renews a short lease and plans to release a margin before its deadline.
    leases.item = { holder: 'holder', expiresAt: Math.floor((holderDeadline - 60_000 + LEASE_TERM_MS / 2) / 1000), releaseAt: Math.floor((holderDeadline - 60_000) / 1000) };
    const slept: number[] = [];
    // Arrives one minute before the holder's release (its deadline less the margin): returns at once.
    clock = holderDeadline - 60_000 - 60_000;
    // Its own window (a five-minute timeout) would last past the release.
    const early = await pollScaleSet(deps({ holder: 'early', deadline: new Date(clock + 300_000), sleep: async (ms) => void slept.push(ms) }), POOL);
    expect(early.kind).toBe('held');
    expect(slept).toEqual([]);
    // Arrives five seconds before it. The holder stops on the tick and its release lands 50 ms
    // later: the waiter, woken at the (whole-second) release time, asks before it and again after.
    const stop = holderDeadline - 60_000;
    clock = stop - 5_000;
    const acquire = leases.acquire.bind(leases);
    leases.acquire = (pool, holder, times, now) => {
      if (leases.item.holder === 'holder' && clock >= stop + 50) leases.item = { ...leases.item, holder: undefined, expiresAt: 0 };
      return acquire(pool, holder, times, now);
    };
    const asked: number[] = [];
    const next = await pollScaleSet(
      deps({
        holder: 'next',
        deadline: new Date(clock + 300_000),
        // The clock stands while the waiter waits (only its sleeps move it); it moves on once the lease is taken.
        now: () => new Date(leases.item.holder === 'holder' ? clock : (clock += 1_000)),
        sleep: async (ms) => {
          slept.push(ms);
          asked.push(clock + ms);
          clock += ms;
        },
      }),
      POOL,
    );
    // Without the grace after the release time the second ask found the expiry (45 s off) too far, and returned held.
    expect(next.kind).toBe('polled');
    expect(asked[0]).toBe(stop);
    expect(slept.length).toBeGreaterThanOrEqual(2);
    expect(slept.every((ms) => ms <= 20_000)).toBe(true);
  });
});

describe('the lease of a crashed holder', () => {
  it('is taken over once its short term has passed since its last renewal, not at its deadline', async () => {
    api.push(setId, 1);
    const start = clock;
    // The holder crashes mid-poll: its poll never returns, it renews no more.
    api.getMessage = () => new Promise(() => {});
    void pollScaleSet(deps({ holder: 'crashed', deadline: new Date(start + 300_000), now: () => new Date(clock) }), POOL);
    await new Promise((r) => setTimeout(r, 50));
    expect(leases.item.holder).toBe('crashed');
    expect(leases.item.expiresAt * 1000).toBeLessThanOrEqual(start + LEASE_TERM_MS);
    api.getMessage = FakeScaleSet.prototype.getMessage.bind(api);
    // Well before the term has passed (further off than the hand-over wait): held.
    clock = start + LEASE_TERM_MS - 60_000;
    expect((await pollScaleSet(deps({ holder: 'early', deadline: new Date(clock + 300_000), sleep: async () => {} }), POOL)).kind).toBe('held');
    // After it, long before the crashed holder's deadline (start + 300 s): taken over.
    clock = start + LEASE_TERM_MS + 2_000;
    expect(start + LEASE_TERM_MS + 2_000).toBeLessThan(start + 300_000 - 60_000);
    const o = await pollScaleSet(deps({ holder: 'next', deadline: new Date(clock + 180_000) }), POOL);
    expect(o.kind).toBe('polled');
  });
});

describe('the end of the poll window', () => {
  it('a poll the window ends (answered as no message, as the client does) sends no demand of its own', async () => {
    api.push(setId, 1);
    await invocation();
    // The client resolves an aborted poll as undefined; here every poll runs until the window ends.
    api.getMessage = async (_session, _last, _max, signal) => {
      await new Promise<void>((resolve) => signal?.addEventListener('abort', () => resolve()));
      return undefined;
    };
    const before = demands.length;
    const t0 = Date.now();
    const o = await pollScaleSet(deps({ now: () => new Date(clock + Date.now() - t0), deadline: new Date(clock + 120_050), marginMs: 120_000 }), POOL);
    expect(o.kind).toBe('polled');
    // The session's own reading only.
    expect(demands.length - before).toBe(1);
  });
});

describe('the lease over a demand (review R4)', () => {
  const started = { kind: 'started' as const, runnerName: 'r-1', runnerId: 1, jobId: 'j-1' };

  it('slow job events do not let the lease run out under the demand: it is renewed right before scale-up is asked', async () => {
    api.push(setId, 2, [started]);
    api.sessionAssigned = 'none';
    const rivals: string[] = [];
    const o = await invocation({
      deadline: new Date(clock + 200_000 + 600_000),
      marginMs: 120_000,
      // Throttled describeFleet/CreateTags: two minutes of job events.
      jobEvents: async () => void (clock += 120_000),
      requestCapacity: async (d) => {
        demands.push(d);
        // Scale-up runs a minute; a rival invocation asks for the lease meanwhile.
        clock += 60_000;
        rivals.push((await leases.acquire(POOL.name, 'rival', { expiresAt: new Date(clock + LEASE_TERM_MS), releaseAt: new Date(clock + 60_000) }, new Date(clock))).kind);
        return { observed: 0, started: 0, unserved: 0 };
      },
    });
    expect(o.kind).toBe('polled');
    expect(demands.length).toBeGreaterThan(0);
    expect(rivals.every((k) => k === 'held')).toBe(true);
  });

  it('a demand that scale-up could not finish before the deadline is not sent: the message is left unacknowledged', async () => {
    const m = api.push(setId, 2, [started]);
    api.sessionAssigned = 'none';
    const o = await invocation({
      deadline: new Date(clock + 200_000 + 300_000),
      marginMs: 120_000,
      // The job events end with less than scale-up's bound left.
      jobEvents: async () => void (clock += 230_000),
    });
    expect(o).toMatchObject({ kind: 'polled', stopped: 'no-time-for-demand' });
    expect(demands).toEqual([]);
    expect(api.acknowledged.has(m)).toBe(false);
  });

  it("a slow renewal before a demand does not let the demand outrun the lease (review R5): with less than scale-up's bound left, no demand", async () => {
    /**
     * The session's reading is served right after the lease is taken; the deadline lies 80 s (the
     * demand's bound) and a little ahead then. With `renewMs` the renewal before the demand takes
     * that long; scale-up runs up to its bound, and a rival asks for the lease 66 s into it.
     */
    const probe = async (renewMs: number) => {
      api = new FakeScaleSet();
      api.emptyWaitMs = 1;
      setId = api.sets.get('linux-set')!;
      leases = new MemoryLeases();
      demands = [];
      clock += 200_000;
      const start = clock;
      let renewals = 0;
      const renew = leases.renew.bind(leases);
      leases.renew = async (lease, expiresAt) => {
        const r = await renew(lease, expiresAt);
        if (++renewals === 1) clock += renewMs;
        return r;
      };
      const rivals: string[] = [];
      const o = await pollScaleSet(
        deps({
          deadline: new Date(start + 85_000),
          marginMs: 80_000,
          requestCapacity: async (d) => {
            demands.push(d);
            clock += 66_000;
            rivals.push((await leases.acquire(POOL.name, 'rival', { expiresAt: new Date(clock + LEASE_TERM_MS), releaseAt: new Date(clock + 60_000) }, new Date(clock))).kind);
            return { observed: 0, started: 0, unserved: 0 };
          },
        }),
        POOL,
      );
      return { o, rivals };
    };
    // A quick renewal: the demand is sent, and the lease covers it to its bound.
    const quick = await probe(0);
    expect(demands).toHaveLength(1);
    expect(quick.rivals).toEqual(['held']);
    // A renewal of 15 s (a lost answer read back and sent again): no demand, the lease is not outrun.
    const slow = await probe(15_000);
    // Without the check after the renewal the demand went out, and the rival took the lease under it.
    expect(slow.rivals).not.toContain('acquired');
    expect(slow.o).toMatchObject({ kind: 'polled', stopped: 'lease-short-for-demand' });
    expect(demands).toEqual([]);
  });

  it('a poll a slow renewal left shorter than a long poll ends at the lease\'s expiry, and the loop renews and polls on', async () => {
    api.sessionAssigned = 'none';
    const t0 = Date.now();
    let skipped = 0;
    const now = () => clock + (Date.now() - t0) + skipped;
    const polls: number[] = [];
    // Every poll holds until it is aborted, answered then as no message (as the client does).
    api.getMessage = async (_session, _last, _max, signal) => {
      polls.push(now());
      await new Promise<void>((resolve) => signal?.addEventListener('abort', () => resolve()));
      return undefined;
    };
    let renewals = 0;
    const renew = leases.renew.bind(leases);
    leases.renew = async (lease, expiresAt) => {
      const r = await renew(lease, expiresAt);
      // The first renewal takes almost the whole term: less than a long poll is left.
      if (++renewals === 1) skipped += LEASE_TERM_MS - 500;
      return r;
    };
    // The window ends 2 s (real time) after the slow renewal.
    const o = await pollScaleSet(deps({ now: () => new Date(now()), deadline: new Date(clock + 300_000), marginMs: 300_000 - LEASE_TERM_MS - 2_000 }), POOL);
    expect(o.kind).toBe('polled');
    // Without the cut the first poll ran to the window's end past the lease's expiry (one poll).
    expect(polls.length).toBeGreaterThanOrEqual(2);
    // The cut comes at the expiry (500 ms in), well before the window's end (2 s): no tight bound, it scales with the machine's load.
    expect(polls[1]! - polls[0]!).toBeLessThan(scaled(1_500));
    expect(renewals).toBe(polls.length);
  });

  it('a lease lost at the renewal before a demand sends no demand and leaves the message unacknowledged', async () => {
    const m = api.push(setId, 2, [started]);
    api.sessionAssigned = 'none';
    const o = await invocation({
      jobEvents: async () => {
        leases.item = { ...leases.item, holder: 'rival' };
      },
    });
    expect(o.kind).toBe('lease-lost');
    expect(demands).toEqual([]);
    expect(api.acknowledged.has(m)).toBe(false);
  });

  it('a lease lost when the runners started are recorded ends the poll as lease-lost, without acknowledging', async () => {
    const m = api.push(setId, 2);
    api.sessionAssigned = 'none';
    const o = await invocation({
      requestCapacity: async (d) => {
        demands.push(d);
        leases.item = { ...leases.item, holder: 'rival' };
        return { observed: 0, started: 1, unserved: 0, startedRunners: [{ instanceId: 'i-a', startedAt: new Date(clock).toISOString() }] };
      },
    });
    expect(o.kind).toBe('lease-lost');
    expect(api.acknowledged.has(m)).toBe(false);
  });

  it('a waiter that finds the planned release passed by more than the hand-over wait sleeps until the expiry, not every few seconds', async () => {
    leases.item = { holder: 'holder', expiresAt: Math.floor((clock + 15_000) / 1000), releaseAt: Math.floor((clock - 25_000) / 1000) };
    const slept: number[] = [];
    const o = await pollScaleSet(
      deps({
        holder: 'next',
        deadline: new Date(clock + 300_000),
        sleep: async (ms) => {
          slept.push(ms);
          clock += ms;
        },
      }),
      POOL,
    );
    expect(o.kind).toBe('polled');
    expect(slept).toHaveLength(1);
    // Each reading of the test's clock moves it a second: the expiry, less the readings since.
    expect(slept[0]).toBeGreaterThan(10_000);
  });
});

describe('a shortfall served in parts', () => {
  /** Scale-up as it serves a demand: at most `cap` of the shortfall the demand's reading and its carried runners leave. */
  const partial = (cap: number, served: { n: number }) => async (d: ScaleSetDemand) => {
    demands.push(d);
    const shortfall = Math.max(0, d.assignedJobs - (d.recentlyStarted?.length ?? 0));
    const started = Math.min(cap, shortfall);
    const startedRunners = Array.from({ length: started }, () => ({ instanceId: `i-${served.n++}`, startedAt: new Date(clock).toISOString() }));
    return { observed: 0, started, unserved: shortfall - started, startedRunners };
  };

  it('a reading whose shortfall is three times what a demand serves is served by three demands at once, before its acknowledgement', async () => {
    const m = api.push(setId, 30);
    api.sessionAssigned = 'none';
    const acked = acksAfterDemands();
    const o = await invocation({ requestCapacity: partial(10, { n: 0 }) });
    expect(o.kind).toBe('polled');
    expect(demands.slice(0, 3).map((d) => d.recentlyStarted?.length ?? 0)).toEqual([0, 10, 20]);
    expect(new Set(demands.slice(0, 3).map((d) => d.traceId)).size).toBe(3);
    // The message is acknowledged after the three.
    expect(acked).toEqual([3]);
    expect(api.acknowledged.has(m)).toBe(true);
    expect(leases.item.recentlyStarted).toHaveLength(30);
  });

  it('a demand that started nothing is not sent again at once (no spin)', async () => {
    api.push(setId, 100);
    api.sessionAssigned = 'none';
    const acked = acksAfterDemands();
    const o = await invocation({
      requestCapacity: async (d) => {
        demands.push(d);
        return { observed: 0, started: 0, unserved: 5, startedRunners: [] };
      },
    });
    expect(o.kind).toBe('polled');
    // The message's one demand, then its acknowledgement: none sent again for its unserved.
    expect(acked).toEqual([1]);
  });

  it('the demands sent at once for one reading are bounded', async () => {
    api.push(setId, 100);
    api.sessionAssigned = 'none';
    const acked = acksAfterDemands();
    await invocation({ requestCapacity: partial(1, { n: 0 }) });
    // Each demand starts one of the 100: the message is acknowledged after the bound, not after 100 demands.
    expect(acked).toEqual([MAX_DEMANDS_PER_READING]);
    expect(demands[MAX_DEMANDS_PER_READING - 1]!.recentlyStarted).toHaveLength(MAX_DEMANDS_PER_READING - 1);
  });
});
