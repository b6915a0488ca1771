import { describe, expect, it } from 'vitest';
import { planPool, RUNNER_ROLL_BATCH } from '../../lambdas/pool/classify';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { fleetConfig, KEYS, standbyTags } from '../support/fixtures';

/** The runner roll of a pool that follows the newest release (planPool's `stale-runner`). */
const NOW = new Date('2026-12-06T12:00:00.000Z');
const minutesAgo = (m: number) => new Date(NOW.getTime() - m * 60_000);
let serial = 0;
function inst(state: string, version: string | undefined, launched = minutesAgo(10), extra: Record<string, string> = {}): ObservedInstance {
  const tags = new Map(Object.entries({ ...standbyTags(), ...(version ? { [KEYS.runnerVersion]: version } : {}), ...extra }));
  return {
    id: `i-${(++serial).toString(16).padStart(17, '0')}`,
    state,
    ...(state === 'stopped' ? { stateReason: 'Client.InstanceInitiatedShutdown' } : {}),
    launchTime: launched,
    tags,
  };
}
const parked = (version: string | undefined, launched?: Date, extra?: Record<string, string>) => inst('stopped', version, launched, extra);
const reasons = (plan: ReturnType<typeof planPool>) => plan.evictions.map((e) => [e.instance.id, e.reason]);

describe('planPool: runner roll', () => {
  const pool = fleetConfig({ warmSize: 5, warmMaxAgeSeconds: 86_400, primingTimeoutSeconds: 600 }).pools[0]!;
  const current = { version: '2.339.0' };

  it('replaces parked instances of another version, oldest first, at most a batch at a time, and launches their replacements', () => {
    const old = [parked('2.338.0', minutesAgo(50)), parked('2.338.0', minutesAgo(40)), parked('2.338.0', minutesAgo(30))];
    const fresh = parked('2.339.0');
    const plan = planPool([...old, fresh], new Set(), pool, KEYS, 4, NOW, undefined, current);
    expect(RUNNER_ROLL_BATCH).toBe(2);
    expect(reasons(plan)).toEqual([
      [old[0]!.id, 'stale-runner'],
      [old[1]!.id, 'stale-runner'],
    ]);
    expect(plan.launch).toBe(2);
    expect(plan.parked).toBe(2);
  });

  it('counts every instance on its way to park as a replacement in flight', () => {
    const old = [parked('2.338.0', minutesAgo(50)), parked('2.338.0', minutesAgo(40))];
    const one = planPool([...old, inst('running', undefined, minutesAgo(1))], new Set(), pool, KEYS, 4, NOW, undefined, current);
    expect(reasons(one)).toEqual([[old[0]!.id, 'stale-runner']]);
    const full = planPool([...old, inst('running', undefined), inst('pending', undefined)], new Set(), pool, KEYS, 4, NOW, undefined, current);
    expect(full.evictions).toEqual([]);
  });

  it('leaves alone: the current version, an instance that names none (its image had the runner), claimed and active ones, and every instance of a pinned pool', () => {
    const same = parked('2.339.0');
    const baked = parked(undefined);
    const claimed = parked('2.338.0');
    const active = inst('running', '2.338.0', minutesAgo(5), { [KEYS.activatedAt]: minutesAgo(1).toISOString() });
    const plan = planPool([same, baked, claimed, active], new Set([claimed.id]), pool, KEYS, 4, NOW, undefined, current);
    expect(plan.evictions).toEqual([]);
    const pinned = planPool([parked('2.338.0'), parked('2.338.0')], new Set(), pool, KEYS, 2, NOW);
    expect(pinned.evictions).toEqual([]);
  });

  it('does not evict an instance twice: over the target first, then the roll from what stays', () => {
    const old = [parked('2.338.0', minutesAgo(50)), parked('2.338.0', minutesAgo(40)), parked('2.338.0', minutesAgo(30))];
    const plan = planPool(old, new Set(), pool, KEYS, 2, NOW, undefined, current);
    expect(reasons(plan)).toEqual([
      [old[0]!.id, 'over-target'],
      [old[1]!.id, 'stale-runner'],
      [old[2]!.id, 'stale-runner'],
    ]);
    expect(new Set(plan.evictions.map((e) => e.instance.id)).size).toBe(plan.evictions.length);
    expect(plan.launch).toBe(2);
  });
});
