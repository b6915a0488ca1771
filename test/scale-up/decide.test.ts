import { describe, expect, it } from 'vitest';
import { bucketOf, bucketsFor, decide, gateCold, isLateDelivery, orderCandidates, parkedByBucket, poolColdGate, reuseAffinityOf, usesOf, type QueuedJob } from '../../lambdas/scale-up/decide';
import { freshStreak, templateOf, type PrimeStreak } from '../../lambdas/pool/backoff';
import { coldLaunchTags, LATE_DELIVERY_SECONDS, launchTicketHoldSeconds, Provider } from '../../lambdas/shared/contract';
import { repositoriesOf, type ObservedInstance } from '../../lambdas/shared/instances';
import { fleetConfig, job, KEYS, standbyTags } from '../support/fixtures';

const NOW = new Date('2026-11-29T12:00:00.000Z');
let serial = 0;
function inst(state: string, tags: Record<string, string>, reason?: string): ObservedInstance {
  return { id: `i-${(++serial).toString(16).padStart(17, '0')}`, state, ...(reason ? { stateReason: reason } : {}), launchTime: NOW, tags: new Map(Object.entries(tags)) };
}
const parked = () => inst('stopped', standbyTags(), 'Client.InstanceInitiatedShutdown');
const runner = (jobId: string, state = 'running') => inst(state, { [KEYS.pool]: 'linux', [KEYS.jobId]: jobId, [KEYS.runnerId]: '1', [KEYS.activatedAt]: 'x' });
const q = (n: number, overrides: Parameters<typeof job>[1] = {}, pool = 'linux'): QueuedJob => ({ key: `m${n}`, job: job(n, overrides), pool });
const opts = { maxWaitSeconds: 3600, salt: 's' };

describe('decide: which jobs go warm, cold or wait', () => {
  type Row = [string, QueuedJob[], ObservedInstance[], number, string[]];
  const rows: Row[] = [
    ['all warm when enough are parked', [q(1), q(2)], [parked(), parked(), parked()], 10, ['warm', 'warm']],
    ['warm up to the parked count, then cold', [q(1), q(2), q(3)], [parked()], 10, ['warm', 'cold', 'cold']],
    ['cold when nothing is parked', [q(1)], [], 10, ['cold']],
    ['priming instances are not candidates', [q(1)], [inst('running', standbyTags())], 10, ['cold']],
    ['spot-interrupted standbys are not candidates', [q(1)], [inst('stopped', standbyTags(), 'Server.SpotInstanceShutdown')], 10, ['cold']],
    ['standbys of another pool are not candidates', [q(1)], [inst('stopped', standbyTags('other'), 'Client.InstanceInitiatedShutdown')], 10, ['cold']],
    ['a served job (running, runner id) is not served again', [q(1)], [runner('github:1'), parked()], 10, ['served']],
    ['a stopped instance with the job tag is a failed activation, not a served job', [q(1)], [runner('github:1', 'stopped'), parked()], 10, ['warm']],
    ['a job twice in the batch is served once', [q(1), { ...q(1), key: 'm1b' }], [parked()], 10, ['warm', 'duplicate']],
    ['a pool at maxRunners makes jobs wait', [q(1)], [runner('github:8'), runner('github:9'), parked()], 2, ['wait']],
    ['capacity left for one: the oldest job gets it', [q(1, { receivedAt: '2026-11-29T11:59:30.000Z' }), q(2, { receivedAt: '2026-11-29T11:58:00.000Z' })], [runner('github:9'), parked()], 2, ['wait', 'warm']],
    ['waiting past the maximum age is expired', [q(1, { receivedAt: '2026-11-29T10:00:00.000Z' })], [runner('github:8'), runner('github:9')], 2, ['expired']],
    ['an old job with capacity is still served', [q(1, { receivedAt: '2026-11-29T10:00:00.000Z' })], [], 2, ['cold']],
    ['parked standbys do not count against maxRunners', [q(1)], [parked(), parked()], 1, ['warm']],
    ['a paused pool (maxRunners 0) starts nothing, warm or cold: every job waits', [q(1), q(2)], [parked(), parked()], 0, ['wait', 'wait']],
    ['a paused pool\'s job past the maximum age is expired', [q(1, { receivedAt: '2026-11-29T10:00:00.000Z' }), q(2)], [], 0, ['expired', 'wait']],
    ['stopped activated instances (finished) do not count', [q(1)], [runner('github:8', 'stopped')], 1, ['cold']],
    ['an unknown pool', [q(1, {}, 'gpu')], [], 10, ['unknown-pool']],
  ];
  it.each(rows)('%s', (_name, jobs, instances, maxRunners, kinds) => {
    const plan = decide(jobs, instances, fleetConfig({ maxRunners, warmSize: 0 }), KEYS, NOW, opts);
    expect(jobs.map((j) => plan.decisions.get(j.key)!.kind)).toEqual(kinds);
  });

  it('names the instance that serves a redelivered job', () => {
    const r = runner('github:1');
    expect(decide([q(1)], [r], fleetConfig(), KEYS, NOW, opts).decisions.get('m1')).toEqual({ kind: 'served', instanceId: r.id });
  });
});

describe('candidate order', () => {
  const ids = Array.from({ length: 50 }, (_, i) => `i-${(0x1000 + i).toString(16).padStart(17, '0')}`);
  it('lists every parked instance once, in an order that depends on the salt', () => {
    const a = orderCandidates(new Map([['linux', ids]]), 'a').get('linux')!;
    const b = orderCandidates(new Map([['linux', ids]]), 'b').get('linux')!;
    expect([...a].sort()).toEqual(ids);
    expect([...b].sort()).toEqual(ids);
    expect(a).not.toEqual(b);
    expect(orderCandidates(new Map([['linux', ids]]), 'a').get('linux')).toEqual(a);
    // Different invocations mostly start on different instances.
    expect(a.slice(0, 5).filter((id) => b.slice(0, 5).includes(id)).length).toBeLessThan(5);
  });
});

describe('the cold gate: what the prime back-off lets a batch launch cold', () => {
  const pool = fleetConfig({ warmSize: 0, primeFailureLimit: 3, primeBackoffCapSeconds: 3600 }).pools[0]!;
  const template = templateOf(pool);
  const coldTags = (n: number, extra: Record<string, string> = {}) =>
    Object.fromEntries([...coldLaunchTags(KEYS, 'linux', { jobId: `github:${n}`, traceId: `t${n}` }, NOW, `token-${n}`).map((t) => [t.Key, t.Value]), ...Object.entries(extra)]);
  const failedCold = (n: number) => inst('terminated', coldTags(n, { [KEYS.startFailure]: 'RUN failed: the runner package: refused nothing installed' }));
  const failing = (failures: number, secondsAgo: number, counted: string[] = []): PrimeStreak => ({
    ...freshStreak(template),
    failures,
    lastFailureAt: new Date(NOW.getTime() - secondsAgo * 1000).toISOString(),
    countedStarts: counted,
  });

  it('a proven template with no failure in view launches all', () => {
    expect(poolColdGate({ ...freshStreak(template), proven: true }, pool, [], KEYS, 20, NOW)).toEqual({ launch: 20 });
  });
  it('an unproven template launches at most the limit at once, cold launches on their way and priming standbys included', () => {
    const hold = launchTicketHoldSeconds(pool.warm.primingTimeoutSeconds);
    expect(poolColdGate(undefined, pool, [], KEYS, 20, NOW)).toEqual({ launch: 3, held: 'unproven', ticket: { template, slots: ['start#1', 'start#2', 'start#3'], holdSeconds: hold } });
    expect(poolColdGate(undefined, pool, [inst('running', coldTags(1)), inst('running', standbyTags())], KEYS, 20, NOW)).toMatchObject({ launch: 1 });
    // A cold runner that took its job, or a parked standby, proves the template.
    expect(poolColdGate(undefined, pool, [inst('running', coldTags(1, { [KEYS.jobStarted]: NOW.toISOString() }))], KEYS, 20, NOW)).toEqual({ launch: 20 });
    expect(poolColdGate(undefined, pool, [parked()], KEYS, 20, NOW)).toEqual({ launch: 20 });
  });
  it('a failure the pool has not counted yet holds every launch for its whole delay from now', () => {
    const f = failedCold(1);
    const resumeAt = new Date(NOW.getTime() + 60_000);
    // The need is named though nothing launches: a failed take-over spends by it.
    const ticket = { template, slots: [`probe#${resumeAt.toISOString()}`], holdSeconds: launchTicketHoldSeconds(pool.warm.primingTimeoutSeconds) };
    expect(poolColdGate({ ...freshStreak(template), proven: true }, pool, [f], KEYS, 5, NOW)).toEqual({ launch: 0, held: 'backoff', resumeAt, ticket });
    // Counted already (the pool remembers it): not counted twice.
    expect(poolColdGate(failing(1, 120, [f.id]), pool, [f], KEYS, 5, NOW)).toMatchObject({ launch: 1, held: 'backoff' });
  });
  it('a failing pool launches one probe once its delay has passed, and none while one is on its way', () => {
    expect(poolColdGate(failing(2, 60), pool, [], KEYS, 5, NOW)).toMatchObject({ launch: 0, held: 'backoff', resumeAt: new Date(NOW.getTime() + 60_000) });
    expect(poolColdGate(failing(2, 120), pool, [], KEYS, 5, NOW)).toMatchObject({ launch: 1, held: 'backoff' });
    expect(poolColdGate(failing(2, 120), pool, [inst('running', coldTags(9))], KEYS, 5, NOW)).toMatchObject({ launch: 0 });
    expect(poolColdGate(failing(2, 120), pool, [inst('pending', standbyTags())], KEYS, 5, NOW)).toMatchObject({ launch: 0 });
    expect(poolColdGate(failing(3, 3599), pool, [], KEYS, 5, NOW)).toMatchObject({ launch: 0, resumeAt: new Date(NOW.getTime() + 1000) });
  });
  it('a failure of another launch template version, or of a warm standby, is not a cold failure of this one', () => {
    const other = inst('terminated', coldTags(1, { [KEYS.startFailure]: 'x', 'aws:ec2launchtemplate:version': '7' }));
    expect(poolColdGate({ ...freshStreak(template), proven: true }, pool, [other], KEYS, 5, NOW)).toEqual({ launch: 5 });
    const standby = inst('terminated', { ...standbyTags(), [KEYS.startFailure]: 'x' });
    expect(poolColdGate({ ...freshStreak(template), proven: true }, pool, [standby], KEYS, 5, NOW)).toEqual({ launch: 5 });
  });
  it('an unreadable streak holds every cold launch (failing safe)', () => {
    expect(poolColdGate('unreadable', pool, [], KEYS, 5, NOW)).toEqual({ launch: 0, held: 'unreadable' });
  });
  it('the oldest jobs take the launches; the rest wait, or dead-letter past their maximum wait', () => {
    const jobs = [
      { key: 'new', pool: 'linux', receivedAt: '2026-11-29T11:59:00.000Z' },
      { key: 'old', pool: 'linux', receivedAt: '2026-11-29T11:50:00.000Z' },
      { key: 'ancient', pool: 'linux', receivedAt: '2026-11-29T10:00:00.000Z' },
      { key: 'other', pool: 'gpu', receivedAt: '2026-11-29T11:00:00.000Z' },
    ];
    const resumeAt = new Date(NOW.getTime() + 600_000);
    const verdicts = gateCold(jobs, new Map([['linux', { launch: 1, held: 'backoff' as const, resumeAt }]]), NOW, 3600);
    expect(Object.fromEntries(verdicts)).toEqual({
      ancient: { kind: 'cold' },
      old: { kind: 'hold', held: 'backoff', resumeAt },
      new: { kind: 'hold', held: 'backoff', resumeAt },
      other: { kind: 'cold' },
    });
    const none = gateCold(jobs, new Map([['linux', { launch: 0, held: 'unreadable' as const }]]), NOW, 3600);
    expect(none.get('ancient')).toEqual({ kind: 'hold-expired', held: 'unreadable' });
    expect(none.get('old')).toEqual({ kind: 'hold', held: 'unreadable' });
  });
});

describe('isLateDelivery', () => {
  const now = new Date('2026-12-02T08:00:00.000Z');
  const ago = (s: number) => new Date(now.getTime() - s * 1000).toISOString();
  it.each([
    ['no creation time', undefined, false],
    ['created just now', ago(1), false],
    ['created at the dedup window', ago(LATE_DELIVERY_SECONDS), false],
    ['created past the dedup window', ago(LATE_DELIVERY_SECONDS + 1), true],
    ['a hook event resent a week later', ago(7 * 86_400), true],
  ])('%s: %s', (_name, createdAt, late) => {
    expect(isLateDelivery(createdAt === undefined ? {} : { createdAt }, now)).toBe(late);
  });
});

describe('reuse: which parked instances a job may take (R1)', () => {
  const reusable = () => fleetConfig({ maxRunners: 10, warmSize: 0, reuse: {} });
  const withAffinity = (affinity: string, uses = '1') => inst('stopped', { ...standbyTags(), [KEYS.affinity]: affinity, [KEYS.uses]: uses }, 'Client.InstanceInitiatedShutdown');
  const A = 'github:acme/app';
  const B = 'github:acme/other';

  it('lists parked instances per pool and affinity; fresh ones under the pool name', () => {
    const fresh = parked();
    const a = withAffinity(A);
    const b = withAffinity(B);
    const lists = parkedByBucket([fresh, a, b], KEYS);
    expect(lists).toEqual(new Map([['linux', [fresh.id]], [bucketOf('linux', A), [a.id]], [bucketOf('linux', B), [b.id]]]));
  });

  it('a job takes its affinity first, then fresh ones; never another affinity', () => {
    expect(bucketsFor('linux', A)).toEqual([bucketOf('linux', A), 'linux']);
    expect(bucketsFor('linux', undefined)).toEqual(['linux']);
    expect(bucketsFor('linux', A)).not.toContain(bucketOf('linux', B));
  });

  type Row = [string, ReturnType<typeof fleetConfig>, QueuedJob[], ObservedInstance[], string[]];
  const rows: () => Row[] = () => [
    ['an instance of the job\'s affinity serves it', reusable(), [q(1)], [withAffinity(A)], ['warm']],
    ['a fresh instance serves a job without a hit', reusable(), [q(1)], [parked()], ['warm']],
    ['an instance of another affinity never serves it: cold', reusable(), [q(1)], [withAffinity(B), withAffinity(B)], ['cold']],
    ['two jobs of A: one hit, one fresh, the third cold', reusable(), [q(1), q(2), q(3)], [withAffinity(A), parked(), withAffinity(B)], ['warm', 'warm', 'cold']],
    ['a job of B takes B\'s instance and leaves the fresh one to A', reusable(), [q(1, { project: 'other' }), q(2)], [withAffinity(B), parked()], ['warm', 'warm']],
    ['a pool without reuse offers no instance with an affinity', fleetConfig({ maxRunners: 10, warmSize: 0 }), [q(1)], [withAffinity(A)], ['cold']],
  ];
  it.each(rows())('%s', (_name, config, jobs, instances, kinds) => {
    const plan = decide(jobs, instances, config, KEYS, NOW, opts);
    expect(jobs.map((j) => plan.decisions.get(j.key)!.kind)).toEqual(kinds);
  });

  it('a job\'s affinity only in a reusable pool; none for a GitLab job without a project id', () => {
    const pool = reusable().pools[0]!;
    expect(reuseAffinityOf(pool, job(1))).toBe(A);
    expect(reuseAffinityOf(fleetConfig().pools[0]!, job(1))).toBeUndefined();
    expect(reuseAffinityOf(pool, { ...job(1), provider: Provider.GITLAB })).toBeUndefined();
    expect(reuseAffinityOf(pool, { ...job(1), provider: Provider.GITLAB, projectId: 42 })).toBe('gitlab:42');
  });

  it('reads the uses tag, 0 when absent or malformed', () => {
    expect(usesOf(withAffinity(A, '7'), KEYS)).toBe(7);
    expect(usesOf(parked(), KEYS)).toBe(0);
    expect(usesOf(withAffinity(A, 'x'), KEYS)).toBe(0);
  });
});

describe('repositoriesOf: the repositories whose runners the sweeps list', () => {
  it('reads repository runner ids and GitHub affinities, lower case, once each; nothing else', () => {
    const i = (tags: Record<string, string>) => inst('running', { ...standbyTags(), ...tags });
    const found = repositoriesOf(
      [i({ [KEYS.runnerId]: 'Acme/App/12' }), i({ [KEYS.affinity]: 'github:acme/app' }), i({ [KEYS.affinity]: 'github:acme/svc' }), i({ [KEYS.runnerId]: '77' }), i({ [KEYS.affinity]: 'gitlab:42' })],
      KEYS,
    );
    expect(found).toEqual(['acme/app', 'acme/svc']);
  });
});
