import { describe, expect, it } from 'vitest';
import { decide } from '../../lambdas/scale-up/decide';
import type { ServedState } from '../../lambdas/scale-up/job-record';
import { capableRunners, retryAction, retryDue } from '../../lambdas/scale-up/retry';
import type { RunnerSummary } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { fleetConfig, job, KEYS, standbyTags } from '../support/fixtures';

const NOW = new Date('2026-11-29T12:00:00.000Z');
const RETRY_AFTER = 300;
const MAX_JOB = 3600;
const ago = (seconds: number) => new Date(NOW.getTime() - seconds * 1000).toISOString();
let serial = 0;

function inst(state: string, tags: Record<string, string>): ObservedInstance {
  return { id: `i-${(++serial).toString(16).padStart(17, '0')}`, state, launchTime: new Date(NOW.getTime() - 3600_000), tags: new Map(Object.entries(tags)) };
}
/** An activated instance of `pool` whose runner is `runnerId`, activated `activated` seconds ago. */
const active = (state: string, runnerId: string, activated: number, pool = 'linux') =>
  inst(state, { [KEYS.pool]: pool, [KEYS.jobId]: 'github:9', [KEYS.runnerId]: runnerId, [KEYS.activatedAt]: ago(activated) });
/** The instance with its own job-started report, `seconds` ago. */
const reported = (i: ObservedInstance, seconds: number): ObservedInstance => ({ ...i, tags: new Map([...i.tags, [KEYS.jobStarted, ago(seconds)]]) });
const runner = (runnerId: string, status: string, busy?: boolean): RunnerSummary => ({ runnerId, name: `r-${runnerId}`, status, ...(busy === undefined ? {} : { busy }) });
const served = (overrides: Partial<ServedState> = {}): ServedState => ({ servedAt: NOW.getTime() / 1000 - RETRY_AFTER - 1, instanceId: 'i-first', attempt: 0, exhausted: false, ...overrides });

describe('retry: when a served job is looked at again', () => {
  it('not before retryAfter, never once exhausted', () => {
    expect(retryDue(served({ servedAt: NOW.getTime() / 1000 - RETRY_AFTER + 1 }), NOW, RETRY_AFTER)).toBe('recent');
    expect(retryDue(served({ servedAt: NOW.getTime() / 1000 - RETRY_AFTER }), NOW, RETRY_AFTER)).toBe('due');
    expect(retryDue(served({ exhausted: true }), NOW, RETRY_AFTER)).toBe('exhausted');
  });

  it('waits for a capable runner, retries within the limit, then exhausts', () => {
    expect(retryAction(served(), ['i-idle'], 2)).toEqual({ kind: 'wait', instanceId: 'i-idle' });
    expect(retryAction(served({ attempt: 1 }), [], 2)).toEqual({ kind: 'retry' });
    expect(retryAction(served({ attempt: 2 }), [], 2)).toEqual({ kind: 'exhaust' });
    expect(retryAction(served(), [], 0)).toEqual({ kind: 'exhaust' });
  });
});

describe('retry: which runners could still take a queued job of the pool', () => {
  type Row = [string, ObservedInstance, RunnerSummary[], boolean];
  const rows: Row[] = [
    ['pending instance (booting)', active('pending', '1', 1000), [], true],
    ['online and not busy (idle)', active('running', '1', 1000), [runner('1', 'online', false)], true],
    ['online and busy (took a job)', active('running', '1', 10), [runner('1', 'online', true)], false],
    ['offline, activated recently (starting)', active('running', '1', 10), [runner('1', 'offline', false)], true],
    ['not listed yet, activated recently (starting)', active('running', '1', 10), [], true],
    ['offline, activated long ago (died)', active('running', '1', RETRY_AFTER + 1), [runner('1', 'offline', false)], false],
    ['gone from the list, activated long ago (died or finished)', active('running', '1', 1000), [], false],
    ['online without a busy flag (GitLab), activated long ago', active('running', '1', 1000), [runner('1', 'online')], false],
    ['online without a busy flag (GitLab), activated recently', active('running', '1', 10), [runner('1', 'online')], true],
    ['stopped (finished)', active('stopped', '1', 10), [runner('1', 'online', false)], false],
    ['another pool', active('running', '1', 10, 'gpu'), [runner('1', 'online', false)], false],
    ['a warm standby priming (not activated)', inst('running', standbyTags()), [], false],
    // GitHub may read busy:false mid-job: the instance's own job-started report wins (the sweep's rule).
    ['online, busy:false, its instance reported its job started 5 min ago', reported(active('running', '1', 1000), 300), [runner('1', 'online', false)], false],
    ['activated recently, not listed, its instance reported its job started', reported(active('running', '1', 60), 30), [], false],
    // Ids name case-insensitive GitHub names; an earlier version tagged a pool's spelling.
    ['idle, its tag spelled in another case than the listed id', active('running', 'Acme/App/1', 1000), [runner('acme/app/1', 'online', false)], true],
    ['online, busy:false, its report older than maxJobSeconds (stale)', reported(active('running', '1', MAX_JOB + 1000), MAX_JOB + 1), [runner('1', 'online', false)], true],
  ];
  it.each(rows)('%s', (_name, instance, runners, capable) => {
    expect(capableRunners([instance], runners, 'linux', KEYS, NOW, RETRY_AFTER, MAX_JOB)).toEqual(capable ? [instance.id] : []);
  });

  // GitHub repository runners (`owner/repo/id`): one of another repository never takes the job.
  const ofRepo = (runnerId: string) => runnerId.startsWith('o1/app/');
  type ScopedRow = [string, ObservedInstance, RunnerSummary[], boolean];
  const scoped: ScopedRow[] = [
    ['idle runner of the job\'s repository', active('running', 'o1/app/1', 1000), [runner('o1/app/1', 'online', false)], true],
    ['idle runner of another repository', active('running', 'o2/app/1', 1000), [runner('o2/app/1', 'online', false)], false],
    ['pending instance of another repository', active('pending', 'o2/app/2', 10), [], false],
    ['starting runner of another repository', active('running', 'o2/app/3', 10), [], false],
    ['pending instance without a runner id yet', inst('pending', { [KEYS.pool]: 'linux', [KEYS.activatedAt]: ago(5) }), [], true],
  ];
  it.each(scoped)('scope: %s', (_name, instance, runners, capable) => {
    expect(capableRunners([instance], runners, 'linux', KEYS, NOW, RETRY_AFTER, MAX_JOB, ofRepo)).toEqual(capable ? [instance.id] : []);
  });
});

describe('decide: a retried job', () => {
  it('is not "served" by the instances of its earlier attempts, but is by a later one', () => {
    const first = inst('running', { [KEYS.pool]: 'linux', [KEYS.jobId]: 'github:1', [KEYS.runnerId]: '1', [KEYS.activatedAt]: ago(600) });
    const parked = inst('stopped', standbyTags());
    const config = fleetConfig({ maxRunners: 10, warmSize: 0 });
    const opts = { maxWaitSeconds: 3600, salt: 's' };
    const retried = { key: 'm1', job: job(1), pool: 'linux', superseded: [first.id] };
    expect(decide([{ ...retried, superseded: [] }], [first, parked], config, KEYS, NOW, opts).decisions.get('m1')).toEqual({ kind: 'served', instanceId: first.id });
    expect(decide([retried], [first, parked], config, KEYS, NOW, opts).decisions.get('m1')?.kind).not.toBe('served');
    const second = inst('running', { [KEYS.pool]: 'linux', [KEYS.jobId]: 'github:1', [KEYS.runnerId]: '2', [KEYS.activatedAt]: ago(10) });
    expect(decide([retried], [first, second, parked], config, KEYS, NOW, opts).decisions.get('m1')).toEqual({ kind: 'served', instanceId: second.id });
  });
});
