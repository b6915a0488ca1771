import { describe, expect, it } from 'vitest';
import { tagKeys, WARM_STANDBY_VALUE } from '../../lambdas/shared/contract';
import { formatReport } from '../../local/report';
import { runScenario } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/**
 * The stock image with every runner download tampered with (the release server changes a
 * byte; the pins are the real digests): no standby can prime and no cold launch can start a
 * runner. The fleet must fail safe: each pool backs off after its prime-failure limit and its
 * PrimeBackoff metric (the alarm's) is 1, launches (standbys and cold launches, one back-off
 * for both) stay within the bound, no runner runs and no registration is used, the jobs wait
 * at their CI server (held by scale-up's cold gate as wait copies in the queue, or
 * dead-lettered), and nothing of the fleet is left behind. The pool's clock is moved past the priming timeouts instead of
 * waiting them out, so nothing here depends on the machine's speed.
 */
describe('faults: a tampered runner download', () => {
  it('backs the pools off, runs no runner, keeps the jobs waiting, and leaves nothing behind', { timeout: scaled(360_000) }, async () => {
    const r = await runScenario({ jobs: 1, faults: { tamperedDownload: true }, deadlineMs: scaled(240_000) });
    const { report, events, logs, world } = r;
    const failSafe = report.failSafe!;
    expect(failSafe, JSON.stringify(report, null, 2).slice(0, 4000)).toMatchObject({ passed: true, failures: [], runnersStarted: 0, jobsTaken: 0 });
    expect(report).toMatchObject({ settled: true, leftovers: 0, served: 0, jobs: 2 });
    expect(report.leftoverDetail).toEqual({ instances: [], parameters: [], registrations: [], users: [] });

    // Each pool launched exactly its prime-failure limit of standbys, each failed its prime,
    // and the pool backs off: its metric is 1 and it held further launches back. Scale-up's
    // cold launches share the back-off: none, or the probes it allows, within the same bound.
    for (const pool of r.fleet.config.pools) {
      const p = failSafe.pools[pool.name]!;
      expect(p).toMatchObject({ standbys: pool.warm.primeFailureLimit, bound: pool.warm.primeFailureLimit + 1, failedPrimes: pool.warm.primeFailureLimit, primeBackoff: 1 });
      expect(p.launches).toBe(p.standbys + p.coldLaunches);
      expect(p.launches).toBeLessThanOrEqual(p.bound);
    }
    expect(logs.some((l) => l.startsWith('pool ') && l.includes('"message":"prime failed"'))).toBe(true);
    expect(logs.some((l) => l.startsWith('pool ') && l.includes('prime back-off: holding launches back'))).toBe(true);

    // Every boot refused its download by its checksum; none installed, none started a runner.
    const failed = events.filter((e) => e.kind === 'boot-failed');
    const keys = tagKeys(r.fleet.config.prefix);
    expect(failed).toHaveLength(world.instances.length);
    for (const e of failed) expect(String(e.detail)).toMatch(/SHA-256 of http:\/\/127\.0\.0\.1:\d+\/\S+ is [0-9a-f]{64}, the pin says [0-9a-f]{64}; the .*refused, nothing installed/);
    expect(events.filter((e) => e.kind === 'runner-installed' || e.kind === 'runner-started')).toEqual([]);
    expect(report.image).toMatchObject({ kind: 'stock', installs: 0 });
    expect(report.image!.downloads).toBeGreaterThanOrEqual(world.instances.length);

    // Any cold launch (a probe) refused its download too and is gone; every job without a
    // launch is held by the back-off (a wait copy in the queue) or dead-lettered past its
    // maximum wait; the jobs wait, still queued at their CI servers, no registration used.
    expect(failSafe.coldRefused).toBe(failSafe.coldLaunches);
    expect(world.instances.filter((i) => i.tags[keys.warmStandby] !== WARM_STANDBY_VALUE).every((i) => i.state === 'terminated')).toBe(true);
    expect([...failSafe.jobsWaiting, ...failSafe.jobsDeadLettered].sort()).toEqual(report.timeline.map((j) => j.job).sort());
    const launched = new Set(report.timeline.filter((j) => j.timeline.some((e) => e.kind === 'started')).map((j) => j.job));
    const unlaunched = report.timeline.filter((j) => !launched.has(j.job) && !j.deadLettered).map((j) => j.job);
    expect(unlaunched.every((j) => failSafe.jobsHeld.includes(j))).toBe(true);
    if (failSafe.jobsHeld.length) {
      expect(failSafe.heldWhy.every((w) => /prime back-off/.test(w))).toBe(true);
      expect(formatReport(report)).toContain(`held by the prime back-off: ${failSafe.jobsHeld.length} of the waiting jobs`);
    }
    expect(world.ciJobs.every((j) => !j.done && !j.failed && !j.runnerName)).toBe(true);
    expect(world.registrations).toEqual([]);
  });
});
