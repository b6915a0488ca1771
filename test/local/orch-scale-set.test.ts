import { describe, expect, it } from 'vitest';
import { buildScaleSetProof, FAULT_MOMENTS, maxOverlap, nextHolding, planScaleSetFaults, queueEffects, queueRefusalsOutsideFaults, requestPath, SCALE_SET_FAULTS, SCALE_SET_SEEDS, scaleSetFigures, type DemandRecord, type LeaseHolding } from '../../local/scale-set-run';
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

  it('never plans the queue token\'s expiry at the moment of a fault that hands the session over (no 401 would come), apart in time when it can', () => {
    const handOvers = ['poller-killed', 'foreign-lease', 'lease-taken-over', 'session-expired'];
    const half = (m: string) => Math.floor(FAULT_MOMENTS.indexOf(m as never) / 2);
    for (let seed = 1; seed <= 50; seed++) {
      const plan = planScaleSetFaults(seed);
      const token = plan.find((f) => f.fault === 'queue-token-expired');
      if (!token) continue;
      const others = plan.filter((f) => handOvers.includes(f.fault));
      expect(others.map((f) => f.moment), `seed ${seed}`).not.toContain(token.moment);
      if (new Set(others.map((f) => half(f.moment))).size < 2) expect(others.map((f) => half(f.moment)), `seed ${seed}`).not.toContain(half(token.moment));
    }
    // Seed 5 plans both with the poller killed (once at the same moment).
    expect(planScaleSetFaults(5).map((f) => f.fault)).toEqual(expect.arrayContaining(['poller-killed', 'queue-token-expired']));
  });
});

describe('--scale-set: the proof', () => {
  const T = 1_000_000;
  const session = (openedAt: number, endedAt?: number, id = String(openedAt)): LoopbackSessionRecord => ({ scaleSetId: 1, sessionId: id, owner: 'o', openedAt, ...(endedAt === undefined ? {} : { endedAt, ended: 'deleted' as const }) });
  const lease = (holder: string, acquiredAt: number, expiresAt: number, releasedAt?: number): LeaseHolding => ({ holder, acquiredAt, expiresAt, ...(releasedAt === undefined ? {} : { releasedAt }) });
  const demand = (holder: string, sentAt: number, answeredAt?: number): DemandRecord => ({ holder, pool: 'p', sentAt, ...(answeredAt === undefined ? {} : { answeredAt }) });
  // b, killed: acquired with a term to T + 10 s, renewed at T + 9 s to T + 15 s.
  const killed: LeaseHolding = { ...lease('b', T + 6_000, T + 15_000), terms: [{ from: T + 6_000, expiresAt: T + 10_000 }, { from: T + 9_000, expiresAt: T + 15_000 }] };
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
    runnersRegistered: 2,
    sessionConflicts: 0,
    unexpectedQueueRefusals: 0,
    // A release, a hand-over at the same moment, a killed holder's expiry, a holder after it.
    leases: [lease('a', T, T + 9_000, T + 6_000), killed, lease('c', T + 15_001, T + 24_000, T + 20_000)],
    // Each within its holding: the killed holder's scale-up answered before its renewal's expiry, c's ends at its release.
    demands: [demand('a', T + 1_000, T + 2_000), demand('b', T + 9_000, T + 15_000), demand('c', T + 16_000, T + 20_000)],
    faults: [{ fault: 'poller-killed' as const, moment: 'after-wave-1' as const, at: 3, effect: 'b stopped dead' }],
    leftovers: [],
    afterDelete: { scaleSets: 0, sessions: 0, leaseItems: 0 },
    endedAt: T + 30_000,
  };

  it('passes when every assigned job completed on one runner, one session and one lease holder at a time, nothing left', () => {
    const p = buildScaleSetProof(good);
    expect(p.failures).toEqual([]);
    expect(p).toMatchObject({ passed: true, jobs: { sent: 2, assigned: 2, done: 2 }, sessions: { opened: 2, maxActive: 1, ended: { deleted: 1, open: 1 } }, lease: { holdings: 3, holders: 3, maxHolders: 1 }, demands: { sent: 3, maxAtOnce: 1 } });
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
    // The killed holder's scale-up still running when the next holder's demand comes.
    ['two invocations\' demands at once', { demands: [demand('b', T + 9_000, T + 16_500), demand('c', T + 16_000, T + 17_000)] }, 'demands of b and c on scale-up for p ran at once (for 0.5 s)'],
    ['a demand past its renewal\'s expiry', { demands: [demand('b', T + 9_000, T + 15_500)] }, 'a demand of b for p ran 0.5 s past its holding of the lease'],
    ['a demand answered after the release', { demands: [demand('a', T + 5_000, T + 6_500)] }, 'a demand of a for p ran 0.5 s past its holding of the lease'],
    ['a demand sent after the release (or a displacement)', { demands: [demand('a', T + 7_000, T + 7_100)] }, 'a demand of a for p was sent 1.0 s after its holding of the lease ended'],
    // The renewal after it came too late: the lease had lapsed at T + 10 s.
    ['a demand covered only by a later renewal', { demands: [demand('b', T + 7_000, T + 11_000)] }, 'a demand of b for p ran 1.0 s past its holding of the lease'],
    ['a demand still running at the end, past the release', { demands: [demand('c', T + 19_000)] }, 'a demand of c for p ran 10.0 s past its holding of the lease'],
    ['a demand of an invocation that never held the lease', { demands: [demand('x', T + 1_000, T + 2_000)] }, 'a demand of x for p was sent while it held no lease'],
    // The demand record broken: the two checks above would pass on nothing.
    ['no demand recorded for assigned jobs', { demands: [] }, '2 job(s) assigned to the scale set and no demand on scale-up recorded'],
    ['a fault never injected', { faults: [{ fault: 'session-expired', moment: 'before-wave-1' }] }, 'fault session-expired (before-wave-1) was never injected'],
    ['a fault without effect', { faults: [{ fault: 'message-redelivered', moment: 'after-wave-2', at: 9 }] }, 'fault message-redelivered (after-wave-2) showed no effect'],
    ['a leftover', { leftovers: ['registration cwr-i-1'] }, 'left behind: registration cwr-i-1'],
    ['the scale set kept', { afterDelete: { scaleSets: 1, sessions: 1, leaseItems: 0 } }, '1 scale set(s) left at GitHub after the Delete'],
    // GitHub hands a job to one runner: a double demand shows as a runner more than the jobs assigned.
    ['a surplus runner', { runnersRegistered: 3 }, '3 runner(s) registered through the scale set for 2 assigned job(s): 1 surplus'],
    ['the lease item kept', { afterDelete: { scaleSets: 0, sessions: 0, leaseItems: 1 } }, '1 lease item(s) of the scale set left in the job-record table after the Delete'],
    ['a session conflict', { sessionConflicts: 1 }, '1 session create(s) of the scale set answered 409 (a session beside another)'],
    ['a 401 not injected', { unexpectedQueueRefusals: 2 }, '2 message queue call(s) answered 401 outside an injected token expiry'],
  ])('fails with %s', (_, change, failure) => {
    const p = buildScaleSetProof({ ...good, ...change });
    expect(p.passed).toBe(false);
    expect(p.failures).toContain(failure);
  });

  it('a 401 on the queue is injected only between a token expiry and the refresh after it', () => {
    const poll = (status: number) => ({ method: 'GET', path: '/_actions/x/_apis/runtime/runnerscalesets/1/sessions/s1/messages', status });
    const refresh = (status: number) => ({ method: 'PATCH', path: '/_actions/x/_apis/runtime/runnerscalesets/1/sessions/s1', status });
    expect(queueRefusalsOutsideFaults([poll(200), poll(401)], [])).toBe(1);
    expect(queueRefusalsOutsideFaults([poll(200), poll(401), refresh(200), poll(200)], [1])).toBe(0);
    expect(queueRefusalsOutsideFaults([poll(401), refresh(200), poll(401)], [0])).toBe(1);
    expect(queueRefusalsOutsideFaults([poll(401), refresh(401), poll(401)], [0])).toBe(0);
    // The token expired again after a hand-over's refresh (its holder handed over without meeting it): each expiry opens its own window.
    expect(queueRefusalsOutsideFaults([poll(200), poll(200), refresh(200), poll(200), poll(200), poll(401), refresh(200)], [1, 4])).toBe(0);
    expect(queueRefusalsOutsideFaults([poll(200), poll(200), refresh(200), poll(200), poll(200), poll(401), refresh(200)], [1])).toBe(1);
  });

  describe('the faults\' effects', () => {
    const q = (method: string, rest: string, status: number) => ({ method, path: `/_actions/x/_apis/runtime/runnerscalesets/1/sessions/${rest}`, status });
    it.each<[string, Parameters<typeof queueEffects.tokenExpired>[0], boolean]>([
      ['a 401 then a refresh of that session', [q('GET', 's1/messages', 401), q('PATCH', 's1', 200), q('GET', 's1/messages', 202)], true],
      // Every hand-over refreshes: a refresh alone is no effect of the expiry.
      ['a refresh with no 401', [q('PATCH', 's1', 200), q('GET', 's1/messages', 202)], false],
      ['a 401 of another session', [q('GET', 's0/messages', 401), q('PATCH', 's1', 200)], false],
      ['a refresh before the 401 only', [q('PATCH', 's1', 200), q('GET', 's1/messages', 401)], false],
    ])('queue-token-expired: %s', (_, requests, seen) => {
      expect(queueEffects.tokenExpired(requests, 's1') !== undefined).toBe(seen);
    });

    it.each<[string, Parameters<typeof queueEffects.redelivered>[0], Parameters<typeof queueEffects.redelivered>[1], boolean]>([
      ['the message whose ack answered 503 delivered again', [q('DELETE', 's1/messages/7', 503), q('DELETE', 's1/messages/7', 503)], [{ scaleSetId: 1, messageId: 7, redelivery: true }], true],
      ['another message delivered again', [q('DELETE', 's1/messages/7', 503)], [{ scaleSetId: 1, messageId: 6, redelivery: true }], false],
      ['no lost acknowledgement', [q('DELETE', 's1/messages/7', 204)], [{ scaleSetId: 1, messageId: 7, redelivery: true }], false],
    ])('message-redelivered: %s', (_, requests, delivered, seen) => {
      expect(queueEffects.redelivered(requests, delivered, 1) !== undefined).toBe(seen);
    });

    it.each<[string, Parameters<typeof queueEffects.ackResent>[0], Parameters<typeof queueEffects.ackResent>[1], boolean]>([
      ['the resend answered 204, no redelivery', [q('DELETE', 's1/messages/7', 503), q('DELETE', 's1/messages/7', 204)], [], true],
      ['the resend answered 404 (taken as done)', [q('DELETE', 's1/messages/7', 503), q('DELETE', 's1/messages/7', 404)], [], true],
      ['no resend', [q('DELETE', 's1/messages/7', 503), q('DELETE', 's1/messages/8', 204)], [], false],
      ['the resend failed', [q('DELETE', 's1/messages/7', 503), q('DELETE', 's1/messages/7', 500)], [], false],
      ['the message delivered again', [q('DELETE', 's1/messages/7', 503), q('DELETE', 's1/messages/7', 204)], [{ scaleSetId: 1, messageId: 7, redelivery: true }], false],
    ])('ack-lost-after-applied: %s', (_, requests, delivered, seen) => {
      expect(queueEffects.ackResent(requests, delivered, 1) !== undefined).toBe(seen);
    });

    it('poller-killed, foreign-lease: recovery is another holder taking the lease after it', () => {
      const mine = lease('k', T, T + 9_000);
      expect(nextHolding([lease('a', T - 5_000, T), mine], mine)).toBeUndefined();
      expect(nextHolding([mine, lease('k', T + 10_000, T + 19_000)], mine)).toBeUndefined();
      expect(nextHolding([mine, lease('b', T + 9_500, T + 19_000)], mine)?.holder).toBe('b');
    });
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
