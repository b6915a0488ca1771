import { describe, expect, it } from 'vitest';
import {
  BASE_DELAY_SECONDS,
  decideLaunch,
  decodeStreak,
  delaySeconds,
  encodeStreak,
  freshStreak,
  nextStreak,
  primeStep,
  templateOf,
  type PrimeStreak,
} from '../../lambdas/pool/backoff';
import { planPool } from '../../lambdas/pool/classify';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { WARM_STANDBY_VALUE, type PoolConfig } from '../../lambdas/shared/contract';
import { fleetConfig, KEYS } from '../support/fixtures';

const T0 = new Date('2026-11-29T12:00:00.000Z');
const at = (seconds: number) => new Date(T0.getTime() + seconds * 1000);
const policy = { limit: 3, capSeconds: 3600 };
const failure = (n: number) => ({ instanceId: `i-0000000${n}`, reason: 'did not park within 900s' });

describe('prime back-off delays', () => {
  it('double from the base after each failure in a row and are the cap from the limit on', () => {
    expect([0, 1, 2, 3, 4, 9].map((k) => delaySeconds(k, policy))).toEqual([0, BASE_DELAY_SECONDS, 2 * BASE_DELAY_SECONDS, 3600, 3600, 3600]);
    expect([1, 2, 3, 4, 5, 10].map((k) => delaySeconds(k, { limit: 10, capSeconds: 300 }))).toEqual([60, 120, 240, 300, 300, 300]);
  });
});

describe('the prime streak', () => {
  const template = 'lt-1:7';
  it('counts failures in a row with the last reason and instance', () => {
    const one = nextStreak(undefined, { template, failed: [failure(1)], parkedLaunchTimes: [] }, at(0));
    const three = nextStreak(one, { template, failed: [failure(2), failure(3)], parkedLaunchTimes: [] }, at(60));
    expect(three).toMatchObject({ failures: 3, proven: false, lastFailureAt: at(60).toISOString(), lastInstanceId: 'i-00000003', lastReason: 'did not park within 900s' });
  });
  it('ends when a standby launched after the last failure parks, and that proves the template', () => {
    const failing = nextStreak(undefined, { template, failed: [failure(1), failure(2)], parkedLaunchTimes: [] }, at(100));
    // Parked, but its prime began before the failure: no proof that priming works now.
    expect(nextStreak(failing, { template, failed: [], parkedLaunchTimes: [at(50)] }, at(200)).failures).toBe(2);
    expect(nextStreak(failing, { template, failed: [], parkedLaunchTimes: [at(150)] }, at(200))).toMatchObject({ failures: 0, proven: true });
  });
  it('starts afresh with another launch template version', () => {
    const failing = nextStreak(undefined, { template, failed: [failure(1), failure(2), failure(3)], parkedLaunchTimes: [] }, at(0));
    expect(nextStreak(failing, { template: 'lt-1:8', failed: [], parkedLaunchTimes: [] }, at(10))).toEqual(freshStreak('lt-1:8'));
  });
  it('is stored as JSON and anything else stored reads as no streak', () => {
    const s = nextStreak(undefined, { template, failed: [failure(1)], parkedLaunchTimes: [] }, at(0));
    expect(decodeStreak(encodeStreak(s))).toEqual(s);
    for (const junk of [undefined, '', 'x', '{}', '{"version":1,"template":"t","failures":-1,"proven":false}', '{"version":1,"template":"t","failures":2,"proven":false}']) {
      expect(decodeStreak(junk)).toBeUndefined();
    }
  });
});

describe('the launch decision', () => {
  const failing = (failures: number, lastFailureAt: Date): PrimeStreak => ({ ...freshStreak('t'), failures, lastFailureAt: lastFailureAt.toISOString() });
  it('launches all that are wanted once the template is proven', () => {
    expect(decideLaunch({ ...freshStreak('t'), proven: true }, policy, 10, 4, at(0))).toEqual({ launch: 10, backingOff: false });
  });
  it('primes at most the limit at once while nothing of the template has primed', () => {
    expect(decideLaunch(freshStreak('t'), policy, 10, 0, at(0)).launch).toBe(3);
    expect(decideLaunch(freshStreak('t'), policy, 10, 2, at(0)).launch).toBe(1);
    expect(decideLaunch(freshStreak('t'), policy, 10, 5, at(0)).launch).toBe(0);
  });
  it('after a failure: one probe, only when nothing primes and the delay has passed', () => {
    expect(decideLaunch(failing(1, at(0)), policy, 10, 0, at(59))).toMatchObject({ launch: 0, backingOff: false, resumeAt: at(60) });
    expect(decideLaunch(failing(1, at(0)), policy, 10, 0, at(60)).launch).toBe(1);
    expect(decideLaunch(failing(1, at(0)), policy, 10, 1, at(600)).launch).toBe(0);
    expect(decideLaunch(failing(1, at(0)), policy, 0, 0, at(600)).launch).toBe(0);
  });
  it('backs off at the cap from the limit on', () => {
    expect(decideLaunch(failing(3, at(0)), policy, 10, 0, at(3599))).toEqual({ launch: 0, backingOff: true, resumeAt: at(3600) });
    expect(decideLaunch(failing(7, at(0)), policy, 10, 0, at(3600))).toEqual({ launch: 1, backingOff: true, resumeAt: at(3600) });
  });
});

/**
 * A pool on a simulated clock whose every prime fails: each launched standby stays running
 * (a failed PRIME never powers off) until the pool's plan evicts it at the priming timeout.
 * The pool runs every `interval` seconds through the same pure steps as the handler
 * (planPool, then primeStep). Returns each launch's time and the back-off flag per run.
 */
function simulate(pool: PoolConfig, hours: number, interval = 60): { launches: number[]; backingOff: boolean[] } {
  const instances = new Map<string, ObservedInstance>();
  let stored: PrimeStreak | undefined;
  const launches: number[] = [];
  const backingOff: boolean[] = [];
  let serial = 0;
  for (let t = 0; t < hours * 3600; t += interval) {
    const now = at(t);
    const plan = planPool([...instances.values()], new Set(), pool, KEYS, pool.warm.size, now);
    const failed = plan.evictions.filter((e) => e.reason === 'priming-timeout').map((e) => ({ instanceId: e.instance.id, reason: e.reason }));
    for (const e of plan.evictions) instances.delete(e.instance.id);
    const { streak, decision } = primeStep(stored, pool, plan, failed, plan.launch, now);
    stored = streak;
    backingOff.push(decision.backingOff);
    for (let i = 0; i < decision.launch; i++) {
      const id = `i-${(++serial).toString(16).padStart(8, '0')}`;
      instances.set(id, { id, state: 'running', launchTime: now, tags: new Map([[KEYS.pool, pool.name], [KEYS.warmStandby, WARM_STANDBY_VALUE]]) } as ObservedInstance);
      launches.push(t);
    }
  }
  return { launches, backingOff };
}

/** The most launches in any hour (every window [t, t + 3600) that starts at a launch). */
function mostInAnHour(launches: readonly number[]): number {
  let most = 0;
  for (let i = 0, j = 0; i < launches.length; i++) {
    while (j < launches.length && launches[j]! < launches[i]! + 3600) j++;
    most = Math.max(most, j - i);
  }
  return most;
}

describe('a pool whose every prime fails, on a simulated clock', () => {
  const cases: [limit: number, capSeconds: number, primingTimeoutSeconds: number, size: number][] = [];
  for (const limit of [1, 3, 5]) for (const cap of [600, 1200, 3600, 7200]) for (const timeout of [60, 300, 900]) for (const size of [1, 3, 10]) cases.push([limit, cap, timeout, size]);

  it.each(cases)('limit %i, cap %is, priming timeout %is, warm size %i: launches per hour stay at most limit + 3600 / cap', (limit, cap, timeout, size) => {
    const pool = fleetConfig({ warmSize: size, primeFailureLimit: limit, primeBackoffCapSeconds: cap, primingTimeoutSeconds: timeout }).pools[0]!;
    const hours = 24;
    const { launches, backingOff } = simulate(pool, hours);
    expect(mostInAnHour(launches)).toBeLessThanOrEqual(limit + 3600 / cap);
    // It still probes, at the cap plus the priming timeout, and says it backs off.
    const probes = launches.filter((t) => t >= 12 * 3600).length;
    expect(probes).toBeGreaterThanOrEqual(Math.floor((12 * 3600) / (cap + timeout + 120)));
    expect(backingOff.at(-1)).toBe(true);
  });

  it('without the back-off the same pool relaunches every priming timeout (the loop this prevents)', () => {
    const pool = fleetConfig({ warmSize: 10, primeFailureLimit: 100, primeBackoffCapSeconds: 60, primingTimeoutSeconds: 900 }).pools[0]!;
    expect(mostInAnHour(simulate(pool, 3).launches)).toBeGreaterThan(3 + 3600 / 3600);
  });

  it('resumes by itself when a standby primes again, and with a new launch template version', () => {
    const pool = fleetConfig({ warmSize: 2, primeFailureLimit: 2, primeBackoffCapSeconds: 3600 }).pools[0]!;
    const failing: PrimeStreak = { ...freshStreak(templateOf(pool)), failures: 5, lastFailureAt: at(0).toISOString() };
    const seen = { parkedLaunchTimes: [] as Date[], priming: 0 };
    expect(primeStep(failing, pool, seen, [], 2, at(60)).decision).toMatchObject({ launch: 0, backingOff: true });
    const primed = primeStep(failing, pool, { parkedLaunchTimes: [at(30)], priming: 0 }, [], 1, at(60));
    expect(primed.decision).toEqual({ launch: 1, backingOff: false });
    const next = { ...pool, launchTemplateVersion: String(Number(pool.launchTemplateVersion) + 1) };
    expect(primeStep(failing, next, seen, [], 2, at(60)).decision).toEqual({ launch: 2, backingOff: false });
  });

  it('resumes with a new image of a pool whose template resolves an image parameter (its version stays), not when the image is unreadable', () => {
    const pool = { ...fleetConfig({ warmSize: 2, primeFailureLimit: 2, primeBackoffCapSeconds: 3600 }).pools[0]!, imageParameter: '/warm-runners/image' };
    const failing: PrimeStreak = { ...freshStreak(templateOf(pool, 'ami-0old')), failures: 5, lastFailureAt: at(0).toISOString() };
    const seen = { parkedLaunchTimes: [] as Date[], priming: 0 };
    expect(primeStep(failing, pool, seen, [], 2, at(60), 'ami-0old').decision).toMatchObject({ launch: 0, backingOff: true });
    // Unreadable this run: the stored streak holds (no reset by a failed read).
    expect(primeStep(failing, pool, seen, [], 2, at(60)).decision).toMatchObject({ launch: 0, backingOff: true });
    // A new image: a new streak (unproven: at most primeFailureLimit prime at once).
    expect(primeStep(failing, pool, seen, [], 2, at(60), 'ami-0new').decision).toEqual({ launch: 2, backingOff: false });
  });
});
