import { beforeEach, describe, expect, it } from 'vitest';
import { Candidates, type Snapshot } from '../../lambdas/scale-up/activate';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { standbyTags } from '../support/fixtures';

/** An observation the test answers when it chooses. */
interface Pending {
  resolve(s: Snapshot): void;
  reject(e: Error): void;
}

const IDS = ['i-a', 'i-b', 'i-c', 'i-d'];
const FRESH_MS = 2_000;

function snapshot(ids: readonly string[] = IDS): Snapshot {
  const instances = ids.map((id): ObservedInstance => ({ id, state: 'stopped', launchTime: new Date(0), tags: new Map(Object.entries(standbyTags())) }));
  return { candidates: new Map([['linux', [...ids]]]), instances };
}

let clock: number;
let pending: Pending[];
const now = () => new Date(clock);
const observe = () => new Promise<Snapshot>((resolve, reject) => pending.push({ resolve, reject }));
/** Lets every promise chain that can move on do so. */
const settle = () => new Promise((r) => setImmediate(r));
const candidates = (maxRefreshes = 10) => new Candidates(snapshot(), new Date(0), observe, now, FRESH_MS, maxRefreshes);

beforeEach(() => {
  clock = 0;
  pending = [];
});

describe('Candidates: one stream of observations per invocation', () => {
  it('verifications asked for before an observation starts share it, and the next pick uses it too', async () => {
    const c = candidates();
    clock = 5_000;
    const [m1, m2] = [c.mark(), c.mark()];
    const v1 = c.observedAfter(m1);
    const v2 = c.observedAfter(m2);
    await settle();
    expect(pending).toHaveLength(1);
    pending[0]!.resolve(snapshot());
    expect((await v1).get('i-a')?.state).toBe('stopped');
    expect((await v2).has('i-b')).toBe(true);
    clock = 5_500;
    expect(await c.next('linux')).toEqual({ instanceId: expect.stringMatching(/^i-/), observedAt: new Date(5_000) });
    expect(pending).toHaveLength(1);
  });

  it('a claim answered while an observation is in flight waits for the next one, which serves every lane that waited', async () => {
    const c = candidates();
    clock = 5_000;
    const v1 = c.observedAfter(c.mark());
    // Answered after the first observation started: it may show the fleet before our write.
    const v2 = c.observedAfter(c.mark());
    const v3 = c.observedAfter(c.mark());
    await settle();
    expect(pending).toHaveLength(1); // never two in flight
    pending[0]!.resolve(snapshot());
    await v1;
    await settle();
    expect(pending).toHaveLength(2);
    pending[1]!.resolve(snapshot(['i-c']));
    expect([...(await v2).keys()]).toEqual(['i-c']);
    expect([...(await v3).keys()]).toEqual(['i-c']);
    expect(pending).toHaveLength(2);
  });

  it('after a lost claim the next pick waits for an observation started after it, and skips what was handed out', async () => {
    const c = candidates();
    const first = await c.next('linux');
    expect(pending).toHaveLength(0); // fresh: no observation needed
    c.lost();
    const second = c.next('linux');
    await settle();
    expect(pending).toHaveLength(1);
    // Others have tagged every instance but two; one of them is ours already.
    pending[0]!.resolve(snapshot([first!.instanceId, IDS.find((id) => id !== first!.instanceId)!]));
    expect((await second)?.instanceId).toBe(IDS.find((id) => id !== first!.instanceId));
    expect(await c.next('linux')).toBeUndefined();
  });

  it('re-observes for a pick a list older than the bound, or than two observations when they take long', async () => {
    const c = candidates();
    clock = 3_000;
    const p1 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(1);
    clock = 4_500; // 1.5 s to answer: a pick may use a list up to 3 s old
    pending[0]!.resolve(snapshot());
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
    pending[1]!.resolve(snapshot()); // answered at once: back to the 2 s bound
    await p3;
    clock = 8_100;
    const p4 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(2);
    await p4;
    // A lost claim re-observes whatever the age.
    c.lost();
    const p5 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(3);
    pending[2]!.resolve(snapshot());
    await p5;
  });

  it('picks start at most maxRefreshes observations; a verification always may', async () => {
    const c = candidates(1);
    clock = 3_000;
    const p1 = c.next('linux');
    await settle();
    pending[0]!.resolve(snapshot());
    await p1;
    clock = 6_000;
    const p2 = c.next('linux');
    await settle();
    expect(pending).toHaveLength(1);
    await p2;
    const v = c.observedAfter(c.mark());
    await settle();
    expect(pending).toHaveLength(2);
    pending[1]!.resolve(snapshot());
    await v;
  });

  it('a failed observation leaves picks their list and fails the verification that waited for it', async () => {
    const c = candidates();
    clock = 3_000;
    const mark = c.mark(); // a claim answered before the pick's observation started
    const pick = c.next('linux');
    const v = c.observedAfter(mark);
    await settle();
    expect(pending).toHaveLength(1);
    pending[0]!.reject(new Error('UnauthorizedOperation'));
    expect((await pick)?.instanceId).toMatch(/^i-/);
    await expect(v).rejects.toThrow('UnauthorizedOperation');
  });
});
