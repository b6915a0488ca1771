import { describe, expect, it } from 'vitest';
import { tagKeys } from '../../lambdas/shared/contract';
import { runScenario } from '../../local/scenario';
import { scaled } from '../support/slowdown';

/**
 * The faults moto cannot produce, each injected where it would arrive: a capacity refusal of
 * StartInstances (SDK middleware on scale-up's EC2 client), a priming that never ends (the
 * player), forged and duplicate deliveries (the webhook), a 500 from GitHub (the loopback
 * server). Each is handled as the design says; nothing lost, nothing left behind.
 */
describe('faults', () => {
  it('serves every real job once, refuses forged deliveries, evicts the stuck instance, and leaves nothing behind', { timeout: scaled(240_000) }, async () => {
    const r = await runScenario({
      jobs: 3,
      poolSize: 3,
      faults: { refuseStart: true, stallPriming: true, badSignature: true, duplicate: true, ciError: true },
      deadlineMs: scaled(180_000),
    });
    const { report, events, deliveries, logs } = r;
    // 3 + 3 jobs, plus the redelivered GitHub job and the twice-announced GitLab job.
    expect(report).toMatchObject({ jobs: 8, served: 8, unserved: 0, deadLettered: 0, leftovers: 0, settled: true });

    // Forged deliveries: 401, nothing queued for them; every other delivery was accepted.
    expect(deliveries.filter((d) => d.what.includes('forged'))).toEqual([
      { what: 'github forged delivery (bad signature)', status: 401 },
      { what: 'gitlab forged delivery (wrong token)', status: 401 },
    ]);
    expect(deliveries.filter((d) => !d.what.includes('forged')).every((d) => d.status === 202)).toBe(true);
    expect(events.some((e) => e.ciJobId === '999999999')).toBe(false);

    // Duplicates: one activation per job. The redelivery was dropped by the queue (counted below); the second
    // GitLab hook's message found the job's instance.
    const keys = tagKeys(r.fleet.config.prefix);
    for (const job of report.timeline) {
      const instances = r.world.instances.filter((i) => i.tags[keys.jobId] === job.job);
      expect(instances.length, job.job).toBe(1);
    }
    expect(events.filter((e) => e.kind === 'started')).toHaveLength(8);
    // Both duplicated jobs reached the webhook twice and were accepted twice (for the GitHub
    // redelivery the queue drops the second send by its deduplication id); the GitLab job's two
    // messages were served once (both in one batch, or the second after the first had its instance).
    const twice = deliveries.find((d) => d.what === 'gitlab second hook for the same job');
    expect(twice?.status).toBe(202);
    const queuedTwice = report.timeline.filter((j) => logs.filter((l) => l.startsWith('webhook') && l.includes('"job queued"') && l.includes(`"jobId":"${j.job}"`)).length === 2);
    expect(queuedTwice.map((j) => j.provider).sort()).toEqual(['github', 'gitlab']);
    expect(logs.some((l) => l.includes('job already has an instance') || l.includes('job appears twice in the batch'))).toBe(true);
    // What the queue itself delivered: the redelivery (same delivery id, so the same
    // deduplication id) was dropped by SQS, one message; the second GitLab hook (another
    // delivery id) was a second message. Every other job: one message.
    const jobBefore = (what: string) => {
      const at = deliveries.findIndex((d) => d.what === what);
      const m = /^(github|gitlab) job (\d+)$/.exec(deliveries[at - 1]?.what ?? '');
      return `${m![1]}:${m![2]}`;
    };
    const redelivered = jobBefore('github redelivery (same delivery id)');
    const announcedTwice = jobBefore('gitlab second hook for the same job');
    expect(r.queueMessagesPerJob).toEqual(Object.fromEntries(report.timeline.map((j) => [j.job, j.job === announcedTwice ? 2 : 1])));
    expect(r.queueMessagesPerJob[redelivered]).toBe(1);

    // The refused start: rolled back (activation log), the job launched cold and was served.
    expect(r.refusedStarts).toBeGreaterThanOrEqual(1);
    expect(logs.some((l) => l.includes('activation rolled back'))).toBe(true);
    expect(report.cold).toBeGreaterThanOrEqual(1);

    // GitHub's 500 on a JIT config: the registration failed once, the job was still served.
    expect(logs.some((l) => l.includes('registering the runner failed'))).toBe(true);

    // The instance that never finished priming was evicted, and the pool is full again.
    expect(r.evictions['priming-timeout']).toBeGreaterThanOrEqual(1);
    expect(report.parked).toEqual({ 'linux-x64': 3, 'gitlab-docker': 3 });
  });
});
