import { describe, expect, it } from 'vitest';
import { decide, orderCandidates, type QueuedJob } from '../../lambdas/scale-up/decide';
import type { ObservedInstance } from '../../lambdas/shared/instances';
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
