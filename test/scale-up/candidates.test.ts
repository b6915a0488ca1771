import { beforeEach, describe, expect, it } from 'vitest';
import { Candidates, ClaimCheck } from '../../lambdas/scale-up/activate';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { standbyTags } from '../support/fixtures';

/** A request the test answers when it chooses. */
interface Pending<T> {
  readonly input?: unknown;
  resolve(value: T): void;
  reject(e: Error): void;
}

type Lists = ReadonlyMap<string, readonly string[]>;
const IDS = ['i-a', 'i-b', 'i-c', 'i-d'];
const FRESH_MS = 2_000;
const lists = (ids: readonly string[] = IDS): Lists => new Map([['linux', [...ids]]]);

let clock: number;
let pending: Pending<Lists>[];
const now = () => new Date(clock);
const observe = () => new Promise<Lists>((resolve, reject) => pending.push({ resolve, reject }));
/** Lets every promise chain that can move on do so. */
const settle = () => new Promise((r) => setImmediate(r));
const candidates = (maxRefreshes = 10) => new Candidates(lists(), new Date(0), observe, now, FRESH_MS, maxRefreshes);

beforeEach(() => {
  clock = 0;
  pending = [];
});

describe('Candidates: one stream of observations per invocation', () => {
  it('picks from a fresh list without observing; lanes that need a newer list share one observation', async () => {
    const c = candidates();
    await c.next('linux');
    expect(pending).toHaveLength(0);
    clock = 5_000;
    const p1 = c.next('linux');
    const p2 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(1);
    pending[0]!.resolve(lists());
    expect((await p1)?.observedAt).toEqual(new Date(5_000));
    expect((await p2)?.observedAt).toEqual(new Date(5_000));
  });

  it('after a lost claim the next pick waits for an observation started after it, not for one in flight, and skips what was handed out', async () => {
    const c = candidates();
    const first = await c.next('linux');
    clock = 3_000;
    const inFlight = c.next('linux'); // starts an observation
    await settle();
    c.lost(); // a claim answered while that observation is in flight
    const afterLoss = c.next('linux');
    await settle();
    expect(pending).toHaveLength(1); // never two in flight
    pending[0]!.resolve(lists());
    await inFlight;
    await settle();
    expect(pending).toHaveLength(2);
    // Others have tagged every instance but two; one of them is ours already.
    const other = IDS.find((id) => id !== first!.instanceId && id !== IDS[1])!;
    pending[1]!.resolve(lists([first!.instanceId, other]));
    expect((await inFlight)?.instanceId).toBe(IDS[1]);
    expect((await afterLoss)?.instanceId).toBe(other);
    expect(await c.next('linux')).toBeUndefined();
  });

  it('re-observes for a pick a list older than the bound, or than two observations when they take long', async () => {
    const c = candidates();
    clock = 3_000;
    const p1 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(1);
    clock = 4_500; // 1.5 s to answer: a pick may use a list up to 3 s old
    pending[0]!.resolve(lists());
    await p1;
    clock = 5_900;
    const p2 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(1);
    await p2;
    clock = 6_100;
    const p3 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(2);
    pending[1]!.resolve(lists()); // answered at once: back to the 2 s bound
    await p3;
    clock = 8_100;
    const p4 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(2);
    await p4;
  });

  it('picks start at most maxRefreshes observations, then use the list they have', async () => {
    const c = candidates(1);
    clock = 3_000;
    const p1 = c.next('linux');
    await settle();
    pending[0]!.resolve(lists());
    await p1;
    clock = 6_000;
    const p2 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(1);
    expect((await p2)?.instanceId).toMatch(/^i-/);
  });

  it('a failed observation leaves picks their list', async () => {
    const c = candidates();
    clock = 3_000;
    const pick = c.next('linux');
    await settle();
    pending[0]!.reject(new Error('UnauthorizedOperation'));
    expect((await pick)?.instanceId).toMatch(/^i-/);
  });
});

describe('Candidates: a reusable pool\'s lists (decide.ts bucketsFor)', () => {
  it('hands out the affinity\'s instances first, then fresh ones, never another affinity\'s', async () => {
    const initial = new Map([
      ['linux', ['i-f1', 'i-f2']],
      ['linux#github:acme/app', ['i-a1']],
      ['linux#github:acme/other', ['i-b1']],
    ]);
    const c = new Candidates(initial, new Date(0), undefined, now, FRESH_MS);
    const buckets = ['linux#github:acme/app', 'linux'];
    const picks = [await c.next(buckets), await c.next(buckets), await c.next(buckets), await c.next(buckets)];
    expect(picks.map((p) => p && [p.instanceId, p.bucket])).toEqual([
      ['i-a1', 'linux#github:acme/app'],
      ['i-f1', 'linux'],
      ['i-f2', 'linux'],
      undefined,
    ]);
    // The other affinity's instance is still there for its own jobs.
    expect((await c.next(['linux#github:acme/other', 'linux']))?.instanceId).toBe('i-b1');
  });
});

describe('ClaimCheck: claimed instances looked at by id', () => {
  let calls: Pending<ObservedInstance[]>[];
  const check = () => new ClaimCheck((ids) => new Promise<ObservedInstance[]>((resolve, reject) => calls.push({ input: ids, resolve, reject })));
  const stopped = (id: string): ObservedInstance => ({ id, state: 'stopped', launchTime: new Date(0), tags: new Map(Object.entries(standbyTags())) });
  beforeEach(() => {
    calls = [];
  });

  it('asks at once for the first claim; claims answered meanwhile wait and share the next request', async () => {
    const c = check();
    const a = c.see('i-a');
    const b = c.see('i-b');
    const d = c.see('i-d');
    await settle();
    expect(calls.map((x) => x.input)).toEqual([['i-a']]);
    calls[0]!.resolve([stopped('i-a')]);
    expect((await a)?.state).toBe('stopped');
    await settle();
    expect(calls.map((x) => x.input)).toEqual([['i-a'], ['i-b', 'i-d']]);
    calls[1]!.resolve([stopped('i-b')]);
    expect((await b)?.id).toBe('i-b');
    expect(await d).toBeUndefined(); // gone
    expect(calls).toHaveLength(2);
  });

  it('a failed request fails the claims that waited for it, and the next ones are still asked', async () => {
    const c = check();
    const a = c.see('i-a');
    const b = c.see('i-b');
    await settle();
    calls[0]!.reject(new Error('UnauthorizedOperation'));
    await expect(a).rejects.toThrow('UnauthorizedOperation');
    await settle();
    calls[1]!.resolve([stopped('i-b')]);
    expect((await b)?.id).toBe('i-b');
  });
});
