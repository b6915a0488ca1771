import { afterAll, describe, expect, it } from 'vitest';
import type { FaultJob } from '../../local/fault-report';
import { runScenario } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/**
 * Issue 11, "Prove it locally": the lost-job faults on five fixed seeds (local/fault-plan.ts), three per run.
 * Per seed: 20% of the jobs' deliveries dropped before the webhook (only the reconciler's
 * listing can find them), 10% answered 5xx (GitHub logs a failed delivery, the reconciler
 * redelivers it), a GitHub runner that takes another job's job, one that dies before taking
 * any, a GitLab job cancelled after its delivery, and GitHub saying `busy: false` for a runner in the
 * middle of its job (and accepting its DELETE). The verdict is the report's, computed from
 * the CI servers' records and moto (local/fault-report.ts); each run is checked here too.
 */
const ALL_SEEDS = [1, 2, 3, 4, 5];
/**
 * The seeds of this run: three of the five, rotating with the UTC day (every seed runs at least
 * every other day), to keep a CI run under its 40 minutes; all five with
 * `CWR_LOST_JOBS_SEEDS=all`, or those listed (`CWR_LOST_JOBS_SEEDS=2,4`).
 */
const SEEDS = seedsOfRun(process.env.CWR_LOST_JOBS_SEEDS);

function seedsOfRun(asked: string | undefined): number[] {
  if (asked === 'all') return ALL_SEEDS;
  if (asked) {
    const seeds = asked.split(',').map(Number);
    if (!seeds.every((n) => ALL_SEEDS.includes(n))) throw new Error(`CWR_LOST_JOBS_SEEDS: "${asked}" is not "all" or a list of ${ALL_SEEDS.join(', ')}`);
    return seeds;
  }
  const day = Math.floor(Date.now() / 86_400_000);
  return [0, 1, 2].map((k) => ALL_SEEDS[(day + k) % ALL_SEEDS.length]!);
}
/** The fewest jobs per provider the plan holds every fault with: each seed settles in about 2 minutes unloaded. */
const JOBS = 3;

/** Every seed's jobs, by seed: the paths a seed may leave to `elsewhere` are checked over all five. */
const origins = new Map<number, readonly FaultJob[]>();

describe('lost-job faults', () => {
  // The plan drops a GitHub delivery and fails a GitLab one in every seed; each job is served by
  // its own path unless a runner started for another job takes it first ('elsewhere'). Over the
  // five seeds, GitHub's queued-runs fallback and GitLab's hook-event resend each served one.
  afterAll(() => {
    // A run of fewer than the five (the default's three, or -t) proves each seed's own part only.
    if (origins.size < ALL_SEEDS.length) return;
    const all = [...origins.values()].flat();
    expect(all.some((j) => j.job.startsWith('github:') && j.fate === 'dropped' && j.origin === 'reconciler'), 'a dropped GitHub job found by the queued-runs fallback').toBe(true);
    expect(all.some((j) => j.job.startsWith('gitlab:') && j.fate === 'failed' && j.origin === 'redelivery'), 'a failed GitLab delivery served through its resend').toBe(true);
  });

  // The deadline is a safety bound, not a speed claim: a job that waits (capacity, the prime
  // back-off) comes back by wait copies whose backoff doubles (15 s, 30 s, 60 s, ...). Seed 4 once
  // left a job unserved at 6 minutes in a CI run, cause not found (session note, 2026-12-06);
  // a failure prints the jobs' fates.
  it.each(SEEDS)('seed %i: every job not cancelled is served once, none cut off, the cancelled one not served, nothing left behind', { timeout: scaled(660_000) }, async (seed) => {
    const { report, world } = await runScenario({ jobs: JOBS, poolSize: 2, faults: { lossy: true }, seed, deadlineMs: scaled(600_000) });
    const proof = report.faultProof!;
    expect(proof.failures, JSON.stringify({ jobs: proof.jobs, ciJobs: world.ciJobs }).slice(0, 6000)).toEqual([]);
    expect(proof.passed).toBe(true);
    expect(report).toMatchObject({ leftovers: 0, settled: true, deadLettered: 0 });

    // The plan's shares, of the jobs' first deliveries.
    expect(proof.deliveries.dropped / proof.deliveries.jobs).toBeGreaterThanOrEqual(0.2);
    expect(proof.deliveries.failed / proof.deliveries.jobs).toBeGreaterThanOrEqual(0.1);
    // A dropped job was found by the reconciler (its trace id names it), or taken by a runner
    // started for another job (the cancelled one's) before the reconciler looked; never by a webhook message.
    for (const j of proof.jobs.filter((x) => x.fate === 'dropped')) expect(['reconciler', 'elsewhere'], j.job).toContain(j.origin);
    for (const j of proof.jobs.filter((x) => x.fate === 'failed')) expect(['redelivery', 'reconciler', 'elsewhere'], j.job).toContain(j.origin);
    expect(proof.jobs.some((j) => j.job.startsWith('github:') && j.fate === 'dropped'), 'the plan drops a GitHub delivery').toBe(true);
    expect(proof.jobs.some((j) => j.job.startsWith('gitlab:') && j.fate === 'failed'), 'the plan fails a GitLab delivery').toBe(true);
    origins.set(seed, proof.jobs);
    expect(proof.jobs.filter((j) => j.origin === 'reconciler' || j.origin === 'redelivery').length).toBeGreaterThan(0);

    // Observed at the CI servers: each job not cancelled finished by one runner of this fleet; the cancelled one by none.
    const cancelled = new Set(proof.cancelled);
    expect(cancelled.size).toBe(1);
    for (const c of world.ciJobs) {
      const id = `${c.provider}:${c.id}`;
      if (cancelled.has(id)) expect(c, id).toMatchObject({ done: false, cancelled: true });
      else expect(c, id).toMatchObject({ done: true });
      expect(c.failed, id).toBeUndefined();
    }
    expect(proof.served).toBe(2 * JOBS - 1);
    // The stray runner that takes another job's job took one not its own; the one that dies took nothing; every wait is known.
    expect(proof.strays.took).toMatch(/^github:/);
    expect(proof.strays.took).not.toBe(proof.strays.takesAnother);
    expect(proof.strays.died).toBe(true);
    for (const j of proof.jobs) expect(j.waitSeconds, j.job).toBeGreaterThanOrEqual(0);
  });
});
