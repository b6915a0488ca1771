import { describe, expect, it } from 'vitest';
import { buildScaleSetProof, maxOverlap, planScaleSetFaults, requestPath, SCALE_SET_FAULTS, SCALE_SET_SEEDS, scaleSetFigures, type LeaseHolding } from '../../local/scale-set-run';
import type { LoopbackSessionRecord } from '../../local/ci/scale-set-service';

describe('--scale-set: the fault plan', () => {
  it('injects every fault in any five consecutive seeds, 2 to 4 per seed, the same for the same seed', () => {
    for (const start of [1, 6, 1000]) {
      const seen = new Set(Array.from({ length: 5 }, (_, k) => planScaleSetFaults(start + k).map((f) => f.fault)).flat());
      expect([...seen].sort()).toEqual([...SCALE_SET_FAULTS].sort());
    }
    for (const seed of SCALE_SET_SEEDS) {
      const plan = planScaleSetFaults(seed);
      expect(plan.length).toBeGreaterThanOrEqual(2);
      expect(plan.length).toBeLessThanOrEqual(4);
      expect(planScaleSetFaults(seed)).toEqual(plan);
    }
  });
});

describe('--scale-set: the proof', () => {
  const T = 1_000_000;
  const session = (openedAt: number, endedAt?: number, id = String(openedAt)): LoopbackSessionRecord => ({ scaleSetId: 1, sessionId: id, owner: 'o', openedAt, ...(endedAt === undefined ? {} : { endedAt, ended: 'deleted' as const }) });
  const lease = (holder: string, acquiredAt: number, expiresAt: number, releasedAt?: number): LeaseHolding => ({ holder, acquiredAt, expiresAt, ...(releasedAt === undefined ? {} : { releasedAt }) });
  const good = {
    scaleSetId: 1,
    jobs: [
      { ciJobId: '10', assignedTo: 1, done: true, runnerName: 'r1' },
      { ciJobId: '11', assignedTo: 1, done: true, runnerName: 'r2' },
    ],
    runnersOfJob: (id: string) => (id === '10' ? ['r1'] : ['r2']),
    jobsOfRunner: (name: string) => (name === 'r1' ? ['10'] : ['11']),
    sessions: [session(T, T + 5_000), session(T + 5_000)],
    maxConcurrentPolls: 1,
    // A release, a hand-over at the same moment, a killed holder's expiry, a holder after it.
    leases: [lease('a', T, T + 9_000, T + 6_000), lease('b', T + 6_000, T + 15_000), lease('c', T + 15_001, T + 24_000, T + 20_000)],
    faults: [{ fault: 'poller-killed' as const, moment: 'after-wave-1' as const, at: 3, effect: 'b stopped dead' }],
    leftovers: [],
    afterDelete: { scaleSets: 0, sessions: 0 },
    endedAt: T + 30_000,
  };

  it('passes when every assigned job completed on one runner, one session and one lease holder at a time, nothing left', () => {
    const p = buildScaleSetProof(good);
    expect(p.failures).toEqual([]);
    expect(p).toMatchObject({ passed: true, jobs: { sent: 2, assigned: 2, done: 2 }, sessions: { opened: 2, maxActive: 1, ended: { deleted: 1, open: 1 } }, lease: { holdings: 3, holders: 3, maxHolders: 1 } });
  });

  it.each<[string, Partial<Parameters<typeof buildScaleSetProof>[0]>, string]>([
    ['a job not assigned', { jobs: [{ ciJobId: '10', done: true }] }, 'job 10 was not assigned to the scale set (to none)'],
    ['a job not completed', { jobs: [{ ciJobId: '10', assignedTo: 1, done: false }] }, 'job 10 of the scale set did not complete'],
    ['a job on two runners', { runnersOfJob: () => ['r1', 'r9'] }, 'job 10 ran on 2 runners: r1, r9'],
    ['a runner with two jobs', { jobsOfRunner: () => ['10', '11'] }, 'runner r1 took 2 jobs: 10, 11'],
    ['two sessions at once', { sessions: [session(T, T + 5_000), session(T + 4_000)] }, '2 sessions of the scale set were active at once'],
    ['an open session beside a new one', { sessions: [session(T), session(T + 4_000, T + 6_000)] }, '2 sessions of the scale set were active at once'],
    ['two polls at once', { maxConcurrentPolls: 2 }, "2 polls of the scale set's queue were open at once"],
    ['a lease taken before its release', { leases: [lease('a', T, T + 9_000, T + 6_000), lease('b', T + 5_999, T + 15_000)] }, '2 pollers held the lease at once'],
    ['a lease taken before a killed holder\'s expiry', { leases: [lease('a', T, T + 9_000), lease('b', T + 8_000, T + 15_000, T + 12_000)] }, '2 pollers held the lease at once'],
    ['a fault never injected', { faults: [{ fault: 'session-expired', moment: 'before-wave-1' }] }, 'fault session-expired (before-wave-1) was never injected'],
    ['a fault without effect', { faults: [{ fault: 'message-redelivered', moment: 'after-wave-2', at: 9 }] }, 'fault message-redelivered (after-wave-2) showed no effect'],
    ['a leftover', { leftovers: ['registration cwr-i-1'] }, 'left behind: registration cwr-i-1'],
    ['the scale set kept', { afterDelete: { scaleSets: 1, sessions: 1 } }, '1 scale set(s) left at GitHub after the Delete'],
  ])('fails with %s', (_, change, failure) => {
    const p = buildScaleSetProof({ ...good, ...change });
    expect(p.passed).toBe(false);
    expect(p.failures).toContain(failure);
  });

  it('maxOverlap: an end and a start at the same moment do not overlap', () => {
    expect(maxOverlap([{ start: 0, end: 5 }, { start: 5, end: 9 }])).toBe(1);
    expect(maxOverlap([{ start: 0, end: 5 }, { start: 4, end: 9 }, { start: 4.5, end: 4.6 }])).toBe(3);
    expect(maxOverlap([])).toBe(0);
  });
});

describe('--scale-set: the two paths\' figures', () => {
  it.each<[string, string, 'actions-service' | 'installation' | 'app' | 'none', ReturnType<typeof requestPath>]>([
    ['GET', '/_actions/x/_apis/runtime/runnerscalesets/1/sessions/abc/messages', 'actions-service', 'scale-set'],
    ['POST', '/actions/runner-registration', 'actions-service', 'scale-set'],
    ['POST', '/orgs/example-org/actions/runners/registration-token', 'installation', 'scale-set'],
    ['POST', '/orgs/example-org/actions/runners/generate-jitconfig', 'installation', 'webhook'],
    ['GET', '/repos/example-org/app/actions/jobs/7', 'installation', 'webhook'],
    ['GET', '/orgs/example-org/actions/runners', 'installation', 'shared'],
    ['POST', '/app/installations/1/access_tokens', 'app', 'shared'],
    ['POST', '/_local/runners/1/job', 'none', undefined],
  ])('%s %s (%s) is the %s path\'s', (method, path, credential, expected) => {
    expect(requestPath({ method, path, credential })).toBe(expected);
  });

  it('per path: warm and cold, job created to started (p50, max), requests per job with the long polls aside, REST registrations saved', () => {
    const t = 1_000_000;
    const f = scaleSetFigures(
      [
        { path: 'scale-set', served: 'warm', createdAt: t, startedAt: t + 2_000 },
        { path: 'scale-set', served: 'cold', createdAt: t, startedAt: t + 9_000 },
        { path: 'scale-set', served: 'cold', createdAt: t, startedAt: t + 8_000 },
        { path: 'webhook', served: 'warm', createdAt: t, startedAt: t + 3_000 },
        { path: 'webhook', served: 'cold' },
      ],
      [
        ...Array.from({ length: 10 }, () => ({ method: 'GET', path: '/_actions/x/_apis/runtime/runnerscalesets/1/sessions/s/messages', credential: 'actions-service' as const })),
        ...Array.from({ length: 3 }, () => ({ method: 'POST', path: '/_actions/x/_apis/runtime/runnerscalesets/1/generatejitconfig', credential: 'actions-service' as const })),
        { method: 'POST', path: '/orgs/o/actions/runners/registration-token', credential: 'installation' as const },
        { method: 'POST', path: '/actions/runner-registration', credential: 'actions-service' as const },
        { method: 'POST', path: '/orgs/o/actions/runners/generate-jitconfig', credential: 'installation' as const },
        { method: 'POST', path: '/orgs/o/actions/runners/generate-jitconfig', credential: 'installation' as const },
        { method: 'GET', path: '/orgs/o/actions/runners', credential: 'installation' as const },
        { method: 'POST', path: '/_local/runners/1/job', credential: 'none' as const },
      ],
    );
    expect(f.scaleSet).toEqual({ jobs: 3, warm: 1, cold: 2, toStartSeconds: { p50: 8, max: 9 }, requests: 15, requestsPerJob: 1.7, registrationCalls: 1, actionsServiceRequests: 14, longPolls: 10, runners: 3, actionsServiceByKind: { 'long poll': 10, 'jit config': 3, 'admin token': 1 } });
    expect(f.webhook).toEqual({ jobs: 2, warm: 1, cold: 1, toStartSeconds: { p50: 3, max: 3 }, requests: 2, requestsPerJob: 1, registrationCalls: 2 });
    expect(f.sharedRequests).toBe(1);
    expect(f.restRegistrationCallsSaved).toBe(2);
  });
});
