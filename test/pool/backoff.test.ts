import { describe, expect, it } from 'vitest';
import {
  BASE_DELAY_SECONDS,
  decideLaunch,
  decodeStreak,
  delaySeconds,
  encodeStreak,
  freshStreak,
  nextStreak,
  observeStarts,
  primeStep,
  templateOf,
  type PrimeStreak,
} from '../../lambdas/pool/backoff';
import { planPool } from '../../lambdas/pool/classify';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { coldLaunchTags, CREATED_BY, launchTicketHoldSeconds, WARM_STANDBY_VALUE, type PoolConfig } from '../../lambdas/shared/contract';
import { gateCold, poolColdGate } from '../../lambdas/scale-up/decide';
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
    // Unproven again: each launch takes one of the limit's start tickets of the new template.
    const start = { slots: ['start#1', 'start#2'], holdSeconds: launchTicketHoldSeconds(pool.warm.primingTimeoutSeconds) };
    expect(primeStep(failing, next, seen, [], 2, at(60)).decision).toEqual({ launch: 2, backingOff: false, ticket: { template: templateOf(next), ...start } });
  });

  it('resumes with a new image of a pool whose template resolves an image parameter (its version stays), not when the image is unreadable', () => {
    const pool = { ...fleetConfig({ warmSize: 2, primeFailureLimit: 2, primeBackoffCapSeconds: 3600 }).pools[0]!, imageParameter: '/warm-runners/image' };
    const failing: PrimeStreak = { ...freshStreak(templateOf(pool, 'ami-0old')), failures: 5, lastFailureAt: at(0).toISOString() };
    const seen = { parkedLaunchTimes: [] as Date[], priming: 0 };
    expect(primeStep(failing, pool, seen, [], 2, at(60), 'ami-0old').decision).toMatchObject({ launch: 0, backingOff: true });
    // Unreadable this run: the stored streak holds (no reset by a failed read).
    expect(primeStep(failing, pool, seen, [], 2, at(60)).decision).toMatchObject({ launch: 0, backingOff: true });
    // A new image: a new streak (unproven: at most primeFailureLimit prime at once).
    expect(primeStep(failing, pool, seen, [], 2, at(60), 'ami-0new').decision).toEqual({
      launch: 2,
      backingOff: false,
      ticket: { template: templateOf(pool, 'ami-0new'), slots: ['start#1', 'start#2'], holdSeconds: launchTicketHoldSeconds(pool.warm.primingTimeoutSeconds) },
    });
  });
});

/**
 * The same pool with a stream of jobs whose every cold launch fails before its runner starts
 * (a broken install): each cold instance tags its failure and terminates `coldFailSeconds`
 * after its launch (templates/start-runner.sh on_exit), and stays in view, as EC2 keeps a
 * terminated instance listed for about an hour. Scale-up runs through the same pure steps as
 * its handler every `interval` (decide.ts poolColdGate, then gateCold over the held jobs, each
 * held job waiting for the next look); the pool runs every 60 s (planPool, observeStarts,
 * primeStep). Returns every launch's time, warm and cold.
 */
function simulateWithJobs(pool: PoolConfig, hours: number, o: { jobEvery: number; coldFailSeconds: number; interval?: number }): { launches: number[]; cold: number; held: number; backingOff: boolean } {
  const instances = new Map<string, ObservedInstance>();
  let stored: PrimeStreak | undefined;
  const launches: number[] = [];
  let serial = 0;
  let cold = 0;
  let waiting: { key: string; pool: string; receivedAt: string }[] = [];
  let backingOff = false;
  const interval = o.interval ?? 15;
  const fresh = (tags: [string, string][], now: Date, state = 'running'): ObservedInstance => {
    const id = `i-${(++serial).toString(16).padStart(8, '0')}`;
    const i = { id, state, launchTime: now, tags: new Map(tags) } as ObservedInstance;
    instances.set(id, i);
    return i;
  };
  for (let t = 0; t < hours * 3600; t += interval) {
    const now = at(t);
    // Cold launches whose install failed: tagged, then terminated; EC2 lists a terminated
    // instance for about an hour.
    for (const i of instances.values()) {
      if (i.state === 'terminated' && now.getTime() - i.launchTime.getTime() > 3600_000) instances.delete(i.id);
      if (i.tags.has(KEYS.startFailure) || i.tags.get(KEYS.createdBy) !== CREATED_BY.scaleUp || now.getTime() - i.launchTime.getTime() < o.coldFailSeconds * 1000) continue;
      instances.set(i.id, { ...i, state: 'terminated', tags: new Map([...i.tags, [KEYS.startFailure, 'RUN failed: the runner package: refused nothing installed']]) });
    }
    if (t % o.jobEvery === 0) waiting.push({ key: `m${t}`, pool: pool.name, receivedAt: now.toISOString() });
    if (t % 60 === 0) {
      const all = [...instances.values()];
      const plan = planPool(all, new Set(), pool, KEYS, pool.warm.size, now);
      const failed = plan.evictions.filter((e) => e.reason === 'priming-timeout').map((e) => ({ instanceId: e.instance.id, reason: e.reason }));
      for (const e of plan.evictions) instances.set(e.instance.id, { ...e.instance, state: 'terminated' });
      const starts = observeStarts(all, KEYS, pool, stored);
      const { streak, decision } = primeStep(stored, pool, { ...plan, starts }, failed, plan.launch, now);
      stored = streak;
      backingOff = decision.backingOff;
      for (let i = 0; i < decision.launch; i++) {
        fresh([[KEYS.pool, pool.name], [KEYS.warmStandby, WARM_STANDBY_VALUE], [KEYS.createdBy, CREATED_BY.pool]], now);
        launches.push(t);
      }
    }
    // Scale-up: the held jobs look again (one batch), the oldest first.
    if (waiting.length > 0) {
      const gate = poolColdGate(stored, pool, [...instances.values()], KEYS, waiting.length, now);
      const verdicts = gateCold(waiting, new Map([[pool.name, gate]]), now, 10 * 3600);
      for (const w of waiting) {
        if (verdicts.get(w.key)!.kind !== 'cold') continue;
        fresh(coldLaunchTags(KEYS, pool.name, { jobId: w.key, traceId: w.key }, now, w.key).map((tag) => [tag.Key, tag.Value]), now);
        launches.push(t);
        cold++;
      }
      waiting = waiting.filter((w) => verdicts.get(w.key)!.kind !== 'cold');
    }
  }
  return { launches, cold, held: waiting.length, backingOff };
}

describe('a pool whose every cold launch fails before its runner starts, with jobs streaming in', () => {
  const cases: [limit: number, capSeconds: number, warmSize: number, jobEvery: number, coldFailSeconds: number][] = [];
  for (const limit of [1, 3, 5]) for (const cap of [600, 3600]) for (const size of [0, 2]) for (const jobEvery of [30, 120]) for (const coldFail of [30, 240]) cases.push([limit, cap, size, jobEvery, coldFail]);

  it.each(cases)('limit %i, cap %is, warm size %i, a job every %is, failing %is after launch: launches per hour (warm and cold) stay at most limit + 3600 / cap', (limit, cap, size, jobEvery, coldFailSeconds) => {
    const pool = fleetConfig({ warmSize: size, primeFailureLimit: limit, primeBackoffCapSeconds: cap, primingTimeoutSeconds: 300 }).pools[0]!;
    const { launches, cold, held, backingOff } = simulateWithJobs(pool, 6, { jobEvery, coldFailSeconds });
    expect(mostInAnHour(launches)).toBeLessThanOrEqual(limit + 3600 / cap);
    // A pool without standbys probes cold (with standbys the pool's run may take each probe
    // first); the jobs wait rather than vanish, and the pool says it backs off.
    if (size === 0) expect(cold).toBeGreaterThan(limit);
    expect(held).toBeGreaterThan(0);
    expect(backingOff).toBe(true);
  });

  it('without the cold gate the same stream launches one instance per job (the loop this prevents)', () => {
    const pool = fleetConfig({ warmSize: 0, primeFailureLimit: 3, primeBackoffCapSeconds: 3600 }).pools[0]!;
    const noGate = { ...pool, warm: { ...pool.warm, primeFailureLimit: 100_000 } };
    expect(mostInAnHour(simulateWithJobs(noGate, 2, { jobEvery: 60, coldFailSeconds: 30 }).launches)).toBeGreaterThan(3 + 1);
  });
});

describe('observing cold launches', () => {
  const pool = fleetConfig({ warmSize: 0 }).pools[0]!;
  const cold = (id: string, extra: [string, string][]): ObservedInstance =>
    ({ id, state: 'terminated', launchTime: T0, tags: new Map([[KEYS.pool, pool.name], [KEYS.createdBy, CREATED_BY.scaleUp], ...extra]) }) as ObservedInstance;

  it('ranks a started job above a start-failure tag: a runner that took its job did start', () => {
    const seen = observeStarts([cold('i-0000000a', [[KEYS.jobStarted, T0.toISOString()], [KEYS.startFailure, 'RUN failed: status 143']])], KEYS, pool, undefined);
    expect(seen.failed).toEqual([]);
    expect(seen.failedIds).toEqual([]);
    expect(seen.startedLaunchTimes).toEqual([T0]);
  });
});

describe('failures in a row, by launch order', () => {
  const pool = fleetConfig({ warmSize: 0, primeFailureLimit: 3, primeBackoffCapSeconds: 3600 }).pools[0]!;
  const proven: PrimeStreak = { ...freshStreak(templateOf(pool)), proven: true };
  const burst = (n: number, tags: (k: number) => [string, string][]): ObservedInstance[] =>
    Array.from({ length: n }, (_, k) => ({ id: `i-b${k.toString(16).padStart(7, '0')}`, state: 'running', launchTime: T0, tags: new Map([[KEYS.pool, pool.name], [KEYS.createdBy, CREATED_BY.scaleUp], ...tags(k)]) }) as ObservedInstance);
  const fails = (k: number): [string, string][] => (k < 3 ? [[KEYS.startFailure, 'RUN failed: status 1']] : []);
  const started = (k: number): [string, string][] => (k < 3 ? [[KEYS.startFailure, 'RUN failed: status 1']] : [[KEYS.jobStarted, at(120).toISOString()]]);

  it('a burst of 50 cold launches at once with 3 failures and 47 started jobs does not back off', () => {
    const { streak, decision } = primeStep(proven, pool, { parkedLaunchTimes: [], priming: 0, starts: observeStarts(burst(50, started), KEYS, pool, proven) }, [], 10, at(180));
    expect(decision.backingOff).toBe(false);
    expect(streak.failures).toBe(0);
    expect(decision.launch).toBe(10);
  });

  it('the same burst seen failing first: the starts of its siblings end the streak on the next run', () => {
    const first = primeStep(proven, pool, { parkedLaunchTimes: [], priming: 0, starts: observeStarts(burst(50, fails), KEYS, pool, proven) }, [], 10, at(60));
    expect(first.streak.failures).toBe(3);
    const next = primeStep(first.streak, pool, { parkedLaunchTimes: [], priming: 0, starts: observeStarts(burst(50, started), KEYS, pool, first.streak) }, [], 10, at(120));
    expect(next.decision.backingOff).toBe(false);
    expect(next.streak.failures).toBe(0);
  });

  it('a success launched before the failures does not end them', () => {
    const s = nextStreak(proven, { template: proven.template, failed: [1, 2, 3].map((n) => ({ ...failure(n), launchTime: at(10) })), parkedLaunchTimes: [at(0)] }, at(60));
    expect(s.failures).toBe(3);
    expect(nextStreak(s, { template: s.template, failed: [], parkedLaunchTimes: [at(5)] }, at(120)).failures).toBe(3);
    expect(nextStreak(s, { template: s.template, failed: [], parkedLaunchTimes: [at(10)] }, at(120)).failures).toBe(0);
  });
});
