import { beforeEach, describe, expect, it } from 'vitest';
import type { AcquireOutcome, HeldOutcome, Lease, LeaseState, ScaleSetLeases } from '../../lambdas/scale-set-listener/lease';
import { pollScaleSet, type PollDeps } from '../../lambdas/scale-set-listener/poll';
import type { PoolConfig, ScaleSetDemand, PoolScaleSetConfig } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { FakeScaleSet } from '../support/fake-scale-set';
import { fleetConfig } from '../support/fixtures';

/**
 * The poll loop's recoveries, with an in-memory lease (the DynamoDB one is tested against moto
 * in lease.test.ts) and the in-memory scale set service. Time is a counter each empty poll
 * moves on, so a poll window ends after a few empty polls.
 */

const POOL: PoolConfig & { scaleSet: PoolScaleSetConfig } = { ...fleetConfig().pools[0]!, scaleSet: { name: 'linux-set', runnerGroup: 'Default' } };

/** One lease item, written under the same conditions as the DynamoDB lease. */
class MemoryLeases implements ScaleSetLeases {
  item: { holder?: string; expiresAt: number } & LeaseState = { expiresAt: 0 };
  acquire(pool: string, holder: string, expiresAt: Date, now: Date): Promise<AcquireOutcome> {
    if (this.item.holder !== undefined && this.item.holder !== holder && this.item.expiresAt >= now.getTime() / 1000) return Promise.resolve({ kind: 'held', holder: this.item.holder, expiresAt: this.item.expiresAt });
    const lease = { pool, holder, expiresAt: Math.floor(expiresAt.getTime() / 1000) };
    this.item = { ...this.item, holder, expiresAt: lease.expiresAt };
    const { sessionId, scaleSetId, lastMessageId } = this.item;
    return Promise.resolve({ kind: 'acquired', lease, state: { ...(sessionId ? { sessionId } : {}), ...(scaleSetId ? { scaleSetId } : {}), ...(lastMessageId !== undefined ? { lastMessageId } : {}) } });
  }
  renew(lease: Lease): Promise<HeldOutcome> {
    return Promise.resolve(this.item.holder === lease.holder ? 'done' : 'lost');
  }
  record(lease: Lease, state: LeaseState): Promise<HeldOutcome> {
    if (this.item.holder !== lease.holder) return Promise.resolve('lost');
    this.item = { ...this.item, ...state };
    return Promise.resolve('done');
  }
  release(lease: Lease, state: LeaseState): Promise<HeldOutcome> {
    if (this.item.holder !== lease.holder) return Promise.resolve('lost');
    this.item = { ...this.item, ...state, holder: undefined, expiresAt: 0 };
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
    deadline: new Date(start + 120_000),
    marginMs: 60_000,
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

/** A poll as the next invocation runs it: a fresh holder, from the lease item's state. */
async function invocation(overrides: Partial<PollDeps> = {}) {
  clock += 200_000;
  return pollScaleSet(deps(overrides), POOL);
}

describe('the scale-set poll loop', () => {
  it('acknowledges a message only after its demand was served, and records it in the lease', async () => {
    const m = api.push(setId, 3);
    const order: string[] = [];
    const o = await invocation({
      requestCapacity: async (d) => {
        order.push(`demand:${d.assignedJobs}:${api.acknowledged.has(m)}`);
        demands.push(d);
        return { observed: 0, started: 3, unserved: 0 };
      },
    });
    expect(o.kind).toBe('polled');
    expect(order).toContain('demand:3:false');
    expect(api.acknowledged.has(m)).toBe(true);
    expect(leases.item.lastMessageId).toBe(m);
    expect(leases.item.holder).toBeUndefined();
    // The session stays open for the next invocation.
    expect(api.active.get(setId)?.sessionId).toBe(leases.item.sessionId);
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
    // The resume's refresh, then one for the expired token.
    expect(api.calls.filter((c) => c === 'refreshSession')).toHaveLength(2);
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

  it('a session conflict with the session the lease names: that session is deleted and a new one created, once', async () => {
    const left = await api.createSession(setId, 'earlier-holder');
    // The lease names it under another scale set id (the scale set was recreated meanwhile), so
    // it is not resumed; creating one meets it.
    leases.item = { expiresAt: 0, sessionId: left.sessionId, scaleSetId: 999 };
    api.push(setId, 1);
    api.calls.length = 0;
    const o = await invocation();
    expect(o.kind).toBe('polled');
    expect(api.calls.filter((c) => c === 'createSession')).toHaveLength(2);
    expect(api.calls).toContain('deleteSession');
    expect(leases.item.sessionId).not.toBe(left.sessionId);
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

  it('a conflict that stays after deleting the named session stops after the second create', async () => {
    const other = await api.createSession(setId, 'someone-else');
    leases.item = { expiresAt: 0, sessionId: 'session-gone-long-ago', scaleSetId: 999 };
    api.calls.length = 0;
    const o = await invocation();
    expect(o.kind).toBe('conflict');
    expect(api.calls.filter((c) => c === 'createSession')).toHaveLength(2);
    expect(api.active.get(setId)?.sessionId).toBe(other.sessionId);
  });

  it('a session that is gone is created anew', async () => {
    api.push(setId, 1);
    await invocation();
    api.active.delete(setId);
    api.push(setId, 2);
    const o = await invocation();
    expect(o.kind).toBe('polled');
    expect(api.calls.filter((c) => c === 'createSession')).toHaveLength(2);
  });
});

describe('the hand-over of the lease', () => {
  it('an invocation arriving shortly before the holder releases waits for it and takes over; an earlier one returns at once', async () => {
    const holderDeadline = clock + 300_000;
    leases.item = { holder: 'holder', expiresAt: Math.floor(holderDeadline / 1000) };
    const slept: number[] = [];
    // Arrives one minute before the holder's release (its deadline less the margin): returns at once.
    clock = holderDeadline - 60_000 - 60_000;
    // Its own window (a five-minute timeout) would last past the release.
    const early = await pollScaleSet(deps({ holder: 'early', deadline: new Date(clock + 300_000), sleep: async (ms) => void slept.push(ms) }), POOL);
    expect(early.kind).toBe('held');
    expect(slept).toEqual([]);
    // Arrives five seconds before it: waits, and the holder has released meanwhile.
    clock = holderDeadline - 60_000 - 5_000;
    const next = await pollScaleSet(
      deps({
        holder: 'next',
        deadline: new Date(clock + 300_000),
        sleep: async (ms) => {
          slept.push(ms);
          clock += ms;
          leases.item = { ...leases.item, holder: undefined, expiresAt: 0 };
        },
      }),
      POOL,
    );
    expect(next.kind).toBe('polled');
    expect(slept).toHaveLength(1);
    expect(slept[0]).toBeLessThanOrEqual(20_000);
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
    const o = await pollScaleSet(deps({ now: () => new Date(clock + Date.now() - t0), deadline: new Date(clock + 60_050), marginMs: 60_000 }), POOL);
    expect(o.kind).toBe('polled');
    // The session's own reading only.
    expect(demands.length - before).toBe(1);
  });
});
