import { describe, expect, it } from 'vitest';
import { runScenario } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/** Burst: more jobs at once than the pools hold parked instances; the rest launch cold; all served. */
describe('burst beyond the pool', () => {
  it('activates the parked instances, launches the rest cold, serves all and leaves nothing behind', { timeout: scaled(240_000) }, async () => {
    const { report, events, logs } = await runScenario({ burst: true, jobs: 4, poolSize: 2, deadlineMs: scaled(180_000) });
    // On a failure: the notes, each unserved job's timeline and the Lambdas' warnings and errors.
    const unserved = report.timeline.filter((j) => j.served === undefined);
    const why = JSON.stringify({ notes: report.notes, unserved, warnings: logs.filter((l) => /"level":"(warn|error)"/.test(l)) }).slice(0, 12_000);
    expect(report, why).toMatchObject({ jobs: 8, served: 8, unserved: 0, deadLettered: 0, leftovers: 0, settled: true });
    expect(report.warm + report.cold).toBe(8);
    for (const provider of ['github', 'gitlab']) {
      const jobs = report.timeline.filter((j) => j.provider === provider);
      // Two parked per pool: at least two jobs of each provider had to launch cold.
      expect(jobs.filter((j) => j.served === 'cold').length, provider).toBeGreaterThanOrEqual(2);
      expect(jobs.every((j) => j.served !== undefined)).toBe(true);
    }
    // Scale-up launched cold instances for jobs (its own log line), and activated parked ones.
    const started = events.filter((e) => e.kind === 'started');
    expect(started.filter((e) => e.detail === 'cold').length).toBeGreaterThanOrEqual(4);
    expect(started.filter((e) => e.detail === 'warm').length).toBeGreaterThanOrEqual(1);
    // Exactly one start per job, even on a loaded machine: a failed warm activation logs a
    // fallback (not a start) before its cold launch, and a retried message finds the job's
    // instance (job tag) instead of starting another. A ninth start would be a job served twice.
    expect(started).toHaveLength(8);
    expect(report.parked).toEqual({ 'linux-x64': 2, 'gitlab-docker': 2 });
  });
});
