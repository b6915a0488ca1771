import { describe, expect, it } from 'vitest';
import { FAULT_SHARES, minimumJobs, planFaults } from '../../local/fault-plan';
import { buildFaultProof } from '../../local/fault-report';
import type { LocalEvent } from '../../local/events';
import type { ObservedWorld, ScenarioJob } from '../../local/report';

describe('the lost-job fault plan', () => {
  it.each([1, 2, 3, 4, 5, 42])('seed %i: reproducible, the shares held, the stray and cancelled jobs delivered', (seed) => {
    for (const jobs of [minimumJobs(), 5, 12]) {
      const plan = planFaults(seed, jobs);
      expect(planFaults(seed, jobs)).toEqual(plan);
      const all = [...plan.fates.github, ...plan.fates.gitlab];
      expect(all.filter((f) => f === 'dropped').length).toBeGreaterThanOrEqual(FAULT_SHARES.dropped * 2 * jobs);
      expect(all.filter((f) => f === 'failed').length).toBeGreaterThanOrEqual(FAULT_SHARES.failed * 2 * jobs);
      expect(plan.takesAnother).not.toBe(plan.dies);
      for (const i of [plan.takesAnother, plan.dies]) expect(plan.fates.github[i]).toBe('delivered');
      expect(plan.fates.gitlab[plan.cancelled]).toBe('delivered');
    }
  });

  it('differs between seeds, and refuses too few jobs', () => {
    const plans = [1, 2, 3, 4, 5].map((s) => JSON.stringify(planFaults(s, 5)));
    expect(new Set(plans).size).toBeGreaterThan(1);
    // Whatever the job count, GitHub loses at least one delivery (its queued-runs fallback) and
    // GitLab answers at least one 5xx (its hook-event resend).
    for (const s of [1, 2, 3, 4, 5]) {
      for (const jobs of [minimumJobs(), 5, 12]) {
        const plan = planFaults(s, jobs);
        expect(plan.fates.github, `seed ${s}, ${jobs} jobs`).toContain('dropped');
        expect(plan.fates.gitlab, `seed ${s}, ${jobs} jobs`).toContain('failed');
      }
    }
    expect(() => planFaults(1, minimumJobs() - 1)).toThrow(`at least ${minimumJobs()} jobs per provider`);
  });
});

describe('the fault proof (pure)', () => {
  const prefix = 'warm-runners';
  const inst = (c: string) => `i-${c.repeat(17)}`;
  const runner = (c: string) => `${prefix}-${inst(c)}-mx63dyy6`;
  const plan = { seed: 9, fates: { github: ['delivered', 'delivered', 'delivered'] as const, gitlab: ['dropped', 'failed', 'delivered'] as const }, takesAnother: 0, dies: 1, cancelled: 2 };
  const jobs: ScenarioJob[] = [
    { provider: 'github', ciJobId: '1', pool: 'p', deliveredAt: 0 },
    { provider: 'github', ciJobId: '2', pool: 'p', deliveredAt: 0 },
    { provider: 'github', ciJobId: '3', pool: 'p', deliveredAt: 0, cancelled: true },
    { provider: 'gitlab', ciJobId: '7', pool: 'q', deliveredAt: 0, fate: 'dropped' },
  ];
  const t = '2026-12-02T12:00:00.000Z';
  const s = '2026-12-02T12:00:30.000Z';
  const events: LocalEvent[] = [
    { t: 1, kind: 'started', provider: 'github', ciJobId: '1', instanceId: inst('a') },
    { t: 1, kind: 'started', provider: 'github', ciJobId: '2', instanceId: inst('b') },
    { t: 2, kind: 'job-done', provider: 'github', ciJobId: '2', runnerName: runner('a') },
    { t: 2, kind: 'job-done', provider: 'github', ciJobId: '1', runnerName: runner('c') },
    { t: 2, kind: 'retried', provider: 'github', ciJobId: '1' },
    { t: 3, kind: 'job-done', provider: 'gitlab', ciJobId: '7', runnerName: runner('d') },
  ];
  const world = (over: Partial<Record<string, object>> = {}): ObservedWorld => ({
    instances: [],
    parameters: [],
    registrations: [],
    deadLetters: [],
    targets: {},
    ciJobs: [
      { provider: 'github', id: '1', done: true, runnerName: runner('c'), createdAt: t, startedAt: s, ...over['1'] },
      { provider: 'github', id: '2', done: true, runnerName: runner('a'), createdAt: t, startedAt: s, ...over['2'] },
      { provider: 'github', id: '3', done: false, cancelled: true, createdAt: t, ...over['3'] },
      { provider: 'gitlab', id: '7', done: true, createdAt: t, startedAt: s, ...over['7'] },
    ],
  });
  const report = { leftovers: 0, settled: true, timeline: [{ job: 'gitlab:7', traceId: 'reconciler-gitlab-7' }, { job: 'github:1', traceId: 'd1' }] } as never;

  it('passes on a run where every job not cancelled was served once and lists origins, retries and waits', () => {
    const p = buildFaultProof({ plan, jobs, events, world: world(), report, prefix });
    expect(p.failures).toEqual([]);
    expect(p).toMatchObject({ passed: true, served: 3, cancelled: ['github:3'], strays: { takesAnother: 'github:1', took: 'github:2', dies: 'github:2', died: true } });
    expect(p.jobs.find((j) => j.job === 'gitlab:7')).toMatchObject({ origin: 'reconciler', fate: 'dropped', waitSeconds: 30, ranOn: inst('d') });
    expect(p.jobs.find((j) => j.job === 'github:1')).toMatchObject({ origin: 'webhook', retries: 1 });
  });

  it.each<[string, Partial<Record<string, object>>, string]>([
    ['a job cut off', { '2': { done: false, failed: true } }, 'github:2: not served (cut off'],
    ['the cancelled job served', { '3': { done: true, cancelled: true } }, 'github:3: cancelled, yet served'],
    ['a job still queued', { '1': { done: false, runnerName: undefined } }, 'github:1: not served'],
    ['a job finished by a runner not of the fleet', { '1': { runnerName: 'someone-elses' } }, 'finished by a runner not of this fleet'],
  ])('fails on %s', (_what, over, failure) => {
    const p = buildFaultProof({ plan, jobs, events, world: world(over), report, prefix });
    expect(p.passed).toBe(false);
    expect(p.failures.join('\n')).toContain(failure);
  });

  it('fails when a job was served twice, something was left behind, or the dying runner served', () => {
    const twice = [...events, { t: 4, kind: 'job-done', provider: 'github', ciJobId: '2', runnerName: runner('e') } as LocalEvent];
    expect(buildFaultProof({ plan, jobs, events: twice, world: world(), report, prefix }).failures).toContain('github:2: finished 2 times');
    const left = { ...(report as object), leftovers: 2 } as never;
    expect(buildFaultProof({ plan, jobs, events, world: world(), report: left, prefix }).failures).toContain('2 thing(s) left behind');
    const served = [...events, { t: 4, kind: 'job-done', provider: 'github', ciJobId: '9', runnerName: runner('b') } as LocalEvent];
    expect(buildFaultProof({ plan, jobs, events: served, world: world(), report, prefix }).failures).toContain('github:2: its first runner did not die before taking a job');
  });

  it('fails when a job dropped before the webhook was served from a webhook delivery (its trace is not the reconciler\'s)', () => {
    const viaWebhook = { ...(report as object), timeline: [{ job: 'gitlab:7', traceId: 'delivery-7' }, { job: 'github:1', traceId: 'd1' }] } as never;
    const p = buildFaultProof({ plan, jobs, events, world: world(), report: viaWebhook, prefix });
    expect(p.jobs.find((j) => j.job === 'gitlab:7')).toMatchObject({ origin: 'webhook', fate: 'dropped' });
    expect(p.passed).toBe(false);
    expect(p.failures).toEqual(["gitlab:7: dropped before the webhook, yet its served trace is a webhook delivery's"]);
  });

  it('fails when one runner finished two jobs, each finished once', () => {
    // Runner c finished job 1 (as before) and job 2 (instead of runner a).
    const twoJobs = events.map((e) => (e.kind === 'job-done' && e.ciJobId === '2' ? { ...e, runnerName: runner('c') } : e));
    const p = buildFaultProof({ plan, jobs, events: twoJobs, world: world(), report, prefix });
    expect(p.passed).toBe(false);
    expect(p.failures).toEqual([`runner ${runner('c')} finished 2 jobs`]);
  });

  it("fails when the planned stray runner did not take another job's job: it took its own, or none", () => {
    // Its own: job 1's first runner (instance a) finished job 1, and job 2 ran on a retry's runner.
    const own = { '1': { runnerName: runner('a') }, '2': { runnerName: runner('c') } };
    const ownEvents = events.map((e) => (e.kind === 'job-done' && e.ciJobId === '1' ? { ...e, runnerName: runner('a') } : e.kind === 'job-done' && e.ciJobId === '2' ? { ...e, runnerName: runner('c') } : e));
    const tookOwn = buildFaultProof({ plan, jobs, events: ownEvents, world: world(own), report, prefix });
    expect(tookOwn.strays).toMatchObject({ takesAnother: 'github:1', took: 'github:1' });
    expect(tookOwn.failures).toEqual(["github:1: its first runner took its own job, not another's"]);
    // None: no job at the CI server names instance a (job 2 ran on another runner).
    const none = buildFaultProof({ plan, jobs, events, world: world({ '2': { runnerName: runner('e') } }), report, prefix });
    expect(none.strays.took).toBeUndefined();
    expect(none.passed).toBe(false);
    expect(none.failures).toContain("github:1: its first runner took no job (the plan has it take another job's)");
  });
});
