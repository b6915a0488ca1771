import { EC2Client } from '@aws-sdk/client-ec2';
import { DeleteParametersCommand, SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createScaleDownHandler } from '../../lambdas/scale-down/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { runnerName, ssmPaths, Provider } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { awsError, FakeAws } from '../support/fake-aws';
import { fleetConfig, KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';

const paths = ssmPaths(PREFIX);
let aws: FakeAws;
let ci: FakeCi;
let lines: Lines;

beforeEach(() => {
  aws?.restore();
  aws = new FakeAws();
  ci = new FakeCi(Provider.GITHUB, PREFIX, () => aws.now.getTime());
  lines = new Lines();
});
afterAll(() => aws.restore());

const hour = 3_600_000;
/** The sweep's clock, ahead of the fake's: advanced between the readings of one test. */
let clock = hour;
beforeEach(() => {
  clock = hour;
});
function handler(truncatedLists?: Set<Provider>) {
  return createScaleDownHandler({
    ec2: new EC2Client({}),
    ssm: new SSMClient({}),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }),
    loadConfig: async () => fleetConfig({ idleTimeoutSeconds: 1800 }),
    providers: () => ({ github: ci }),
    now: () => new Date(aws.now.getTime() + clock),
    sink: lines.sink,
    ...(truncatedLists ? { truncatedLists } : {}),
  })();
}
function activated(runnerId: string, extra: Record<string, string> = {}) {
  return aws.addInstance({
    state: 'running',
    tags: { ...standbyTags(), [KEYS.activatedAt]: aws.now.toISOString(), [KEYS.jobId]: 'github:1', [KEYS.runnerId]: runnerId, [KEYS.traceId]: 't-1', ...extra },
  });
}
/** An idle reading by an earlier sweep, past the confirmation window (2 minutes by default). */
const readIdleBefore = () => ({ [KEYS.idleSince]: new Date(aws.now.getTime() + hour - 3 * 60_000).toISOString() });
/** One sweep, then another past the confirmation window; the second's summary. */
async function twoSweeps() {
  await handler();
  clock += 3 * 60_000;
  return handler();
}

describe('scale-down handler', () => {
  it('decides nothing from a provider whose runner list failed', async () => {
    const i = activated('7');
    ci.listRunners = async () => {
      throw new Error('502');
    };
    expect(await handler()).toEqual({ terminated: 0, parametersDeleted: 0, runnersDeleted: 0, idleStopped: 0 });
    expect(i.state).toBe('running');
    expect(lines.logs('listing runners failed; skipping the decisions that need them')).toHaveLength(1);
  });

  it('terminates in one call, deregisters idle runners, logs each with its trace id and reason', async () => {
    const a = activated('1');
    const b = activated('2');
    for (const [id, inst] of [['1', a], ['2', b]] as const) ci.runners.set(id, { runnerId: id, name: runnerName(PREFIX, inst.id, aws.now), status: 'online', busy: false, instanceId: inst.id, jobId: 'x' });
    const summary = await twoSweeps();
    expect(summary.terminated).toBe(2);
    expect(aws.count('TerminateInstances')).toBe(1);
    expect(ci.deleted.sort()).toEqual(['1', '2']);
    expect(lines.logs('terminated').map((l) => [l.reason, l.traceId])).toEqual([
      ['idle', 't-1'],
      ['idle', 't-1'],
    ]);
    expect(lines.metric('Sweeps', { Pool: 'linux', Reason: 'idle' })).toBe(2);
  });

  it('reuse: a repository runner of an organisation fleet (listed at its repository only) is seen, not read as a finished job', async () => {
    const i = activated('acme/app/5');
    // As GitHub lists it: only when the sweep names the repository (FakeCi `scoped`).
    ci.runners.set('acme/app/5', { runnerId: 'acme/app/5', name: runnerName(PREFIX, i.id, aws.now), status: 'online', busy: true, instanceId: i.id, jobId: 'github:1' });
    ci.scoped.set('acme/app/5', 'acme/app');
    await twoSweeps();
    expect(i.state).toBe('running');
    expect(ci.deleted).toEqual([]);
  });

  it('a failed termination is retried by the next sweep, which finds the runner gone', async () => {
    const a = activated('1', readIdleBefore());
    ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, a.id, aws.now), status: 'online', busy: false, instanceId: a.id, jobId: 'x' });
    aws.fault('TerminateInstances', awsError('UnauthorizedOperation'));
    expect((await handler()).terminated).toBe(0);
    expect(a.state).toBe('running');
    expect(await handler()).toMatchObject({ terminated: 1 });
    expect(lines.logs('terminated').map((l) => l.reason)).toEqual(['job-finished']);
  });

  it('deregisters an idle runner before terminating, and keeps the instance when the runner took a job meanwhile', async () => {
    const a = activated('1', readIdleBefore());
    const b = activated('2', readIdleBefore());
    for (const [id, inst] of [['1', a], ['2', b]] as const) ci.runners.set(id, { runnerId: id, name: runnerName(PREFIX, inst.id, aws.now), status: 'online', busy: false, instanceId: inst.id, jobId: 'x' });
    // Runner 1 is idle when listed, and picks up a job right after.
    const list = ci.listRunners.bind(ci);
    ci.listRunners = async () => {
      const seen = await list();
      ci.runners.get('1')!.busy = true;
      return seen;
    };
    expect(await handler()).toMatchObject({ terminated: 1 });
    expect(a.state).toBe('running');
    expect(b.state).not.toBe('running');
    expect(ci.deleted).toEqual(['2']);
    expect(lines.logs(/^keeping the instance/).map((l) => [l.instanceId, l.runnerId])).toEqual([[a.id, '1']]);
  });

  it('does not terminate an instance whose runner is missing from a list cut at the page cap', async () => {
    const a = activated('1');
    const truncated = new Set<Provider>();
    // The provider reports the cut through onListTruncated while it lists.
    ci.listRunners = async () => {
      truncated.add(Provider.GITHUB);
      return [];
    };
    expect(await handler(truncated)).toMatchObject({ terminated: 0 });
    expect(a.state).toBe('running');
    // The next, complete list decides again.
    ci.listRunners = async () => [];
    expect(await handler(truncated)).toMatchObject({ terminated: 1 });
  });

  it('deletes the config parameter of an instance it terminates in the same run, with the orphans, and keeps a busy one\'s', async () => {
    const idle = activated('1', readIdleBefore());
    const busy = activated('2');
    for (const [id, inst, isBusy] of [['1', idle, false], ['2', busy, true]] as const) {
      ci.runners.set(id, { runnerId: id, name: runnerName(PREFIX, inst.id, aws.now), status: 'online', busy: isBusy, instanceId: inst.id, jobId: 'x' });
      // A config the instance never consumed (a runner that never started): it holds a runner secret.
      aws.parameters.set(paths.runnerConfig(inst.id), { value: 'secret', tags: {}, at: aws.now });
    }
    const orphan = paths.runnerConfig('i-0000000000000abcd');
    aws.parameters.set(orphan, { value: 'x', tags: {}, at: aws.now });
    expect(await handler()).toEqual({ terminated: 1, parametersDeleted: 2, runnersDeleted: 0, idleStopped: 0 });
    expect(idle.state).not.toBe('running');
    expect([...aws.parameters.keys()]).toEqual([paths.runnerConfig(busy.id)]);
    expect(aws.ssm.commandCalls(DeleteParametersCommand).map((c) => c.args[0].input.Names!.sort())).toEqual([[orphan, paths.runnerConfig(idle.id)].sort()]);
    expect(lines.metric('Sweeps', { Reason: 'instance-terminated' })).toBe(1);
    expect(lines.metric('Sweeps', { Reason: 'instance-gone' })).toBe(1);
  });

  it('does not delete the config parameter of an instance whose termination failed', async () => {
    const a = activated('1');
    aws.parameters.set(paths.runnerConfig(a.id), { value: 'secret', tags: {}, at: aws.now });
    aws.fault('TerminateInstances', awsError('UnauthorizedOperation'));
    expect(await handler()).toMatchObject({ terminated: 0, parametersDeleted: 0 });
    expect(aws.parameters.has(paths.runnerConfig(a.id))).toBe(true);
    expect(aws.count('DeleteParameters')).toBe(0);
  });

  // Every attempt's answer is lost (503 after the fact): the outcome is read back, never assumed.
  const lostAnswers = (execute: boolean) =>
    Array.from({ length: 6 }, () => (input: Record<string, unknown>) => {
      if (execute) for (const n of input.Names as string[]) aws.parameters.delete(n);
      throw awsError('ServiceUnavailable', 503);
    });

  it('a delete whose answer was lost but which happened is read back as done, not sent again', async () => {
    const a = activated('1');
    aws.parameters.set(paths.runnerConfig(a.id), { value: 'secret', tags: {}, at: aws.now });
    aws.fault('DeleteParameters', ...lostAnswers(true));
    expect(await handler()).toMatchObject({ terminated: 1, parametersDeleted: 1 });
    expect(aws.count('DeleteParameters')).toBe(1);
    // Listed once to plan, once to read the outcome back.
    expect(aws.count('GetParametersByPath')).toBe(2);
    expect(lines.logs(/^deleting config parameters failed/)).toHaveLength(0);
  });

  it('a delete whose answers were all lost and which did not happen is read back as not done, and logged', async () => {
    const a = activated('1');
    aws.parameters.set(paths.runnerConfig(a.id), { value: 'secret', tags: {}, at: aws.now });
    aws.fault('DeleteParameters', ...lostAnswers(false));
    expect(await handler()).toMatchObject({ terminated: 1, parametersDeleted: 0 });
    expect(aws.parameters.has(paths.runnerConfig(a.id))).toBe(true);
    expect(lines.logs(/^deleting config parameters failed/)).toHaveLength(1);
    expect(lines.metric('Sweeps', { Reason: 'instance-terminated' })).toBe(0);
  });

  it('deletes orphaned parameters ten per call', async () => {
    for (let n = 0; n < 12; n++) aws.parameters.set(paths.runnerConfig(`i-${(0xabc0 + n).toString(16).padStart(17, '0')}`), { value: 'x', tags: {}, at: aws.now });
    expect((await handler()).parametersDeleted).toBe(12);
    expect(aws.ssm.commandCalls(DeleteParametersCommand).map((c) => c.args[0].input.Names!.length)).toEqual([10, 2]);
    expect(lines.metric('Sweeps', { Reason: 'instance-gone' })).toBe(12);
  });

  it('reclaims an idle runner only on a second idle reading a window later, and records the readings on the instance', async () => {
    const a = activated('1');
    ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, a.id, aws.now), status: 'online', busy: false, instanceId: a.id, jobId: 'x' });
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect(a.tags.get(KEYS.idleSince)).toBe(new Date(aws.now.getTime() + hour).toISOString());
    clock += 60_000;
    expect(await handler()).toMatchObject({ terminated: 0 });
    clock += 60_000;
    expect(await handler()).toMatchObject({ terminated: 1 });
    expect(ci.deleted).toEqual(['1']);
  });

  it('a working reading between two idle ones clears the first: the window starts again', async () => {
    const a = activated('1');
    ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, a.id, aws.now), status: 'online', busy: false, instanceId: a.id, jobId: 'x' });
    await handler();
    ci.runners.get('1')!.busy = true;
    clock += 3 * 60_000;
    await handler();
    expect(a.tags.has(KEYS.idleSince)).toBe(false);
    ci.runners.get('1')!.busy = false;
    clock += 3 * 60_000;
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect(ci.deleted).toEqual([]);
    expect(a.state).toBe('running');
  });

  it('never deregisters the runner of an instance that reported its job started, however long the provider says idle', async () => {
    const a = activated('1', { [KEYS.jobStarted]: aws.now.toISOString() });
    ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, a.id, aws.now), status: 'online', busy: false, instanceId: a.id, jobId: 'x' });
    for (let n = 0; n < 4; n++) {
      expect(await handler()).toMatchObject({ terminated: 0 });
      clock += hour;
    }
    expect(ci.deleted).toEqual([]);
    expect(aws.count('CreateTags')).toBe(0);
    // Its job ends: the ephemeral runner goes. Its report is still fresh (4 h of 6), so one
    // reading without the runner only marks; a second a window later takes the instance.
    ci.runners.delete('1');
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect(aws.count('CreateTags')).toBe(1);
    clock += 3 * 60_000;
    expect(await handler()).toMatchObject({ terminated: 1 });
    expect(lines.logs('terminated').map((l) => l.reason)).toEqual(['job-finished']);
  });

  it('a job-started report that lands after the instances were read, before the DELETE, still keeps the runner', async () => {
    const a = activated('1', readIdleBefore());
    ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, a.id, aws.now), status: 'online', busy: false, instanceId: a.id, jobId: 'x' });
    const list = ci.listRunners.bind(ci);
    // The runner takes a job while the provider is listed (busy: false, a wrong reading); its
    // instance's report lands then, after DescribeInstances.
    ci.listRunners = async () => {
      a.tags.set(KEYS.jobStarted, new Date(aws.now.getTime() + hour).toISOString());
      return list();
    };
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect(ci.deleted).toEqual([]);
    expect(a.state).toBe('running');
    expect(lines.logs('keeping the instance: its job-started report changed since the reading')).toHaveLength(1);
  });

  it('keeps idle runners when the report cannot be read again; the next sweep reclaims them', async () => {
    const a = activated('1', readIdleBefore());
    ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, a.id, aws.now), status: 'online', busy: false, instanceId: a.id, jobId: 'x' });
    const list = ci.listRunners.bind(ci);
    ci.listRunners = async () => {
      aws.fault('DescribeInstances', ...Array.from({ length: 6 }, () => awsError('ServiceUnavailable', 503)));
      return list();
    };
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect(ci.deleted).toEqual([]);
    expect(lines.logs(/^reading job-started reports again failed/)).toHaveLength(1);
    ci.listRunners = list;
    expect(await handler()).toMatchObject({ terminated: 1 });
    expect(ci.deleted).toEqual(['1']);
  });

  it('a mark whose CreateTags failed is read again by the next sweep, which marks it then', async () => {
    const a = activated('1');
    ci.runners.set('1', { runnerId: '1', name: runnerName(PREFIX, a.id, aws.now), status: 'online', busy: false, instanceId: a.id, jobId: 'x' });
    aws.fault('CreateTags', ...Array.from({ length: 6 }, () => awsError('ServiceUnavailable', 503)));
    await handler();
    expect(a.tags.has(KEYS.idleSince)).toBe(false);
    expect(lines.logs(/^marking idle runners failed/)).toHaveLength(1);
    clock += 3 * 60_000;
    expect(await handler()).toMatchObject({ terminated: 0 });
    expect(a.tags.has(KEYS.idleSince)).toBe(true);
  });
});
