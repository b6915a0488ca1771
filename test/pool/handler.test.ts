import { CancelSpotInstanceRequestsCommand, EC2Client, RunInstancesCommand } from '@aws-sdk/client-ec2';
import { PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createPoolHandler, EVICTION_MARKER, LEFTOVER_MARKER_MS } from '../../lambdas/pool/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { encodeParking, LAUNCH_TEMPLATE_VERSION_TAG, ssmPaths, type FleetConfig } from '../../lambdas/shared/contract';
import { ticketKey, type LaunchTickets, type Ticket } from '../../lambdas/shared/launch-tickets';
import { LAUNCH_SENDS } from '../../lambdas/shared/launch-outcome';
import { awsError, FakeAws, lostAnswer } from '../support/fake-aws';
import { fleetConfig, KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';

const paths = ssmPaths(PREFIX);
let aws: FakeAws;
let lines: Lines;

beforeEach(() => {
  aws?.restore();
  aws = new FakeAws();
  lines = new Lines();
});
afterAll(() => aws.restore());

function handler(config: FleetConfig) {
  return createPoolHandler({
    ec2: new EC2Client({}),
    ssm: new SSMClient({}),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }),
    loadConfig: async () => config,
    now: () => aws.now,
    sink: lines.sink,
  });
}
/** Parameters left besides the pool's prime streak (which a launch on a fresh template writes). */
const markers = () => [...aws.parameters.keys()].filter((name) => name !== paths.primeState('linux'));
const parked = (tags: Record<string, string> = {}, spotRequestId?: string) =>
  aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: { ...standbyTags(), ...tags }, ...(spotRequestId ? { spotRequestId } : {}) });

describe('pool handler', () => {
  it('launches standbys to the target with stop-on-shutdown and the standby tags, and reports the counts', async () => {
    parked();
    const [summary] = await handler(fleetConfig({ warmSize: 3 }))();
    expect(summary).toMatchObject({ target: 3, parked: 1, priming: 0, launched: 2 });
    const run = aws.ec2.commandCalls(RunInstancesCommand)[0]!.args[0].input;
    expect(run.MaxCount).toBe(2);
    expect(run.InstanceInitiatedShutdownBehavior).toBe('stop');
    expect(run.InstanceMarketOptions).toBeUndefined();
    expect(run.TagSpecifications![0]!.Tags).toEqual(
      expect.arrayContaining([
        { Key: KEYS.warmStandby, Value: 'true' },
        { Key: KEYS.pool, Value: 'linux' },
      ]),
    );
    expect(lines.metric('ParkedInstances', { Pool: 'linux' })).toBe(1);
    expect(lines.metric('PrimingInstances', { Pool: 'linux' })).toBe(2);
    expect(lines.metric('TargetInstances', { Pool: 'linux' })).toBe(3);
  });

  it.each([
    ['launched, answer lost: found by its token', true, 1],
    ['not launched, answer lost: resent with the same token', false, 2],
  ])('a launch whose answer was lost is settled by its token, never retried on the next type (%s)', async (_, executed, sends) => {
    aws.fault('RunInstances', executed ? lostAnswer() : awsError('ServiceUnavailable', 503));
    const [summary] = await handler(fleetConfig({ warmSize: 3, instanceTypes: ['t3.micro', 't3.small'] }))();
    expect(aws.count('RunInstances')).toBe(sends);
    expect(summary).toMatchObject({ target: 3, launched: 3 });
    const standbys = [...aws.instances.values()];
    expect(standbys).toHaveLength(3);
    const calls = aws.ec2.commandCalls(RunInstancesCommand).map((c) => c.args[0].input);
    const token = calls[0]!.ClientToken;
    expect(token).toMatch(/^[0-9a-f-]{36}$/);
    // A resend is the same request: the same token, type and subnet.
    for (const c of calls) expect(c).toEqual(calls[0]);
    for (const i of standbys) expect(i.tags.get(KEYS.launchToken)).toBe(token);
    // The next run counts what exists: it launches nothing more.
    const [next] = await handler(fleetConfig({ warmSize: 3, instanceTypes: ['t3.micro', 't3.small'] }))();
    expect(next).toMatchObject({ launched: 0, priming: 3 });
  });

  it('a launch whose every send lost its answer, with nothing found by its token, launches nothing more this run', async () => {
    aws.fault('RunInstances', awsError('ServiceUnavailable', 503), awsError('ServiceUnavailable', 503), awsError('ServiceUnavailable', 503));
    const [summary] = await handler(fleetConfig({ warmSize: 3, instanceTypes: ['t3.micro', 't3.small'] }))();
    expect(aws.count('RunInstances')).toBe(LAUNCH_SENDS);
    expect(summary).toMatchObject({ launched: 0 });
    expect(lines.logs('launch outcome unknown after every resend; the next run counts what exists')).toHaveLength(1);
  });

  it('a resend refused after a lost answer is no refusal: the lost send may still land, so no other type is tried this run', async () => {
    aws.fault('RunInstances', awsError('ServiceUnavailable', 503), awsError('InsufficientInstanceCapacity'));
    const [summary] = await handler(fleetConfig({ warmSize: 3, instanceTypes: ['t3.micro', 't3.small'] }))();
    const calls = aws.ec2.commandCalls(RunInstancesCommand).map((c) => c.args[0].input);
    expect(calls).toHaveLength(2);
    expect(calls[1]).toEqual(calls[0]);
    expect(summary).toMatchObject({ launched: 0 });
    expect(lines.logs('launch outcome unknown after every resend; the next run counts what exists')).toHaveLength(1);
  });

  it('follows the warm schedule: the window in force sets the target', async () => {
    // aws.now is Sunday 12:00 UTC.
    // A fresh pool primes at most primeFailureLimit standbys at once (backoff.ts): room for all 4.
    const config = fleetConfig({ warmSize: 1, warmSchedule: [{ window: 'SUN 11:00-13:00', size: 4 }], primeFailureLimit: 4 });
    expect((await handler(config)())[0]).toMatchObject({ target: 4, launched: 4 });
    const off = fleetConfig({ warmSize: 1, warmSchedule: [{ window: 'MON-FRI 07:00-19:00', size: 4 }] });
    aws.restore();
    aws = new FakeAws();
    expect((await handler(off)())[0]).toMatchObject({ target: 1, launched: 1 });
  });

  it('launches spot standbys only as persistent requests that stop on interruption', async () => {
    await handler(fleetConfig({ warmSize: 1, spot: true }))();
    const run = aws.ec2.commandCalls(RunInstancesCommand)[0]!.args[0].input;
    expect(run.InstanceMarketOptions).toEqual({ MarketType: 'spot', SpotOptions: { SpotInstanceType: 'persistent', InstanceInterruptionBehavior: 'stop' } });
  });

  it('cancels the spot request before terminating, counts the eviction by reason, and leaves no marker', async () => {
    const stale = parked({ [LAUNCH_TEMPLATE_VERSION_TAG]: '0' }, 'sir-1');
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(aws.calls.filter((c) => c === 'CancelSpotInstanceRequests' || c === 'TerminateInstances')).toEqual(['CancelSpotInstanceRequests', 'TerminateInstances']);
    expect(aws.ec2.commandCalls(CancelSpotInstanceRequestsCommand)[0]!.args[0].input.SpotInstanceRequestIds).toEqual(['sir-1']);
    expect(aws.instances.get(stale.id)!.state).toBe('terminated');
    expect(lines.metric('Evictions', { Pool: 'linux', Reason: 'stale-template' })).toBe(1);
    expect(lines.logs('evicted')[0]).toMatchObject({ instanceId: stale.id, reason: 'stale-template' });
    expect(aws.parameters.size).toBe(0);
  });

  it.each([
    [true, 0],
    [false, 1],
  ])('a marker delete whose answer was lost is read back, never sent again (executed: %s)', async (executed, warnings) => {
    const stale = parked({ [LAUNCH_TEMPLATE_VERSION_TAG]: '0' });
    aws.fault('DeleteParameter', (input: Record<string, unknown>) => {
      if (executed) aws.parameters.delete(input.Name as string);
      throw awsError('ServiceUnavailable', 503);
    });
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(aws.instances.get(stale.id)!.state).toBe('terminated');
    // A second delete could remove a config that scale-up wrote under the same name meanwhile.
    expect(aws.count('DeleteParameter')).toBe(1);
    // Listed once to observe the claims, once to read the outcome back.
    expect(aws.count('GetParametersByPath')).toBe(2);
    expect(aws.parameters.has(paths.runnerConfig(stale.id))).toBe(!executed);
    expect(lines.logs(/^removing an eviction marker failed/)).toHaveLength(warnings);
  });

  it('writes its eviction lock as a plain String marker (no secret, readable by listing), without the fleet key', async () => {
    parked({ [LAUNCH_TEMPLATE_VERSION_TAG]: '0' });
    const base = fleetConfig({ warmSize: 0 });
    await handler({ ...base, parameters: { ...base.parameters, kmsKeyId: 'alias/fleet' } })();
    const puts = aws.ssm.commandCalls(PutParameterCommand).map((c) => c.args[0].input);
    expect(puts).toHaveLength(1);
    expect(puts[0]).toMatchObject({ Type: 'String', Value: expect.stringMatching(/^evicting=[0-9a-f-]{36}\n$/), Overwrite: false });
    expect(puts[0]!.KeyId).toBeUndefined();
  });

  it.each([
    ['landed', true],
    ['did not land', false],
  ])('an eviction lock whose answer was lost is read back, and no marker stays either way (%s)', async (_, executed) => {
    const stale = parked({ [LAUNCH_TEMPLATE_VERSION_TAG]: '0' });
    aws.fault('PutParameter', executed ? lostAnswer() : awsError('ServiceUnavailable', 503));
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(aws.count('PutParameter')).toBe(1);
    // Held: evicted in this run. Not held: the instance stays, claimable.
    expect(aws.instances.get(stale.id)!.state).toBe(executed ? 'terminated' : 'stopped');
    expect(aws.parameters.size).toBe(0);
  });

  it('a lost lock answer next to a claim by scale-up is not taken as ours', async () => {
    const i = parked({ [LAUNCH_TEMPLATE_VERSION_TAG]: '0' });
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: 'scale-up config', tags: {}, at: aws.now, type: 'SecureString' });
      throw awsError('ServiceUnavailable', 503);
    });
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(i.state).toBe('stopped');
    expect(aws.parameters.get(paths.runnerConfig(i.id))!.value).toBe('scale-up config');
  });

  it('a lost lock answer next to another pool run\'s marker is not taken as ours', async () => {
    // Two runs overlap (a run may take longer than the schedule's minute): the other run's
    // marker landed, ours did not. Held by both, either run's release would delete the
    // other's lock while it is about to terminate.
    const i = parked({ [LAUNCH_TEMPLATE_VERSION_TAG]: '0' });
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: EVICTION_MARKER, tags: {}, at: aws.now, type: 'String' });
      throw awsError('ServiceUnavailable', 503);
    });
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(i.state).toBe('stopped');
    expect(aws.parameters.get(paths.runnerConfig(i.id))!.value).toBe(EVICTION_MARKER);
    expect(lines.logs('eviction lock outcome unknown, resolved by listing')).toEqual([expect.objectContaining({ held: false })]);
  });

  it('removes a marker left by an earlier run (one whose lost write landed after its read-back), and only an old one', async () => {
    const old = parked();
    const fresh = parked();
    const claim = parked();
    const at = (ms: number) => new Date(aws.now.getTime() - ms);
    aws.parameters.set(paths.runnerConfig(old.id), { value: EVICTION_MARKER, tags: {}, at: at(LEFTOVER_MARKER_MS + 1), type: 'String' });
    aws.parameters.set(paths.runnerConfig(fresh.id), { value: EVICTION_MARKER, tags: {}, at: at(60_000), type: 'String' });
    aws.parameters.set(paths.runnerConfig(claim.id), { value: 'config', tags: {}, at: at(LEFTOVER_MARKER_MS + 1), type: 'SecureString' });
    await handler(fleetConfig({ warmSize: 3 }))();
    // The runner configs and markers (the pool's prime state lives beside them, elsewhere).
    const configs = [...aws.parameters.keys()].filter((name) => name.startsWith(paths.runnerConfigRoot));
    expect(configs.sort()).toEqual([paths.runnerConfig(fresh.id), paths.runnerConfig(claim.id)].sort());
    expect(lines.logs('removing a leftover eviction marker')).toEqual([expect.objectContaining({ instanceId: old.id, removed: true })]);
  });

  it('keeps an instance whose spot request could not be cancelled', async () => {
    const garbage = aws.addInstance({ state: 'stopped', reason: 'Server.SpotInstanceShutdown', tags: standbyTags(), spotRequestId: 'sir-2' });
    aws.fault('CancelSpotInstanceRequests', awsError('UnauthorizedOperation'));
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(aws.instances.get(garbage.id)!.state).toBe('stopped');
    expect(aws.count('TerminateInstances')).toBe(0);
    expect(aws.parameters.size).toBe(0);
  });

  it('a garbage instance that cannot be evicted does not hold back the launches the target needs', async () => {
    aws.addInstance({ state: 'stopped', reason: 'Server.InternalError', tags: standbyTags() });
    aws.fault('TerminateInstances', awsError('UnauthorizedOperation'));
    const [summary] = await handler(fleetConfig({ warmSize: 2 }))();
    expect(summary).toMatchObject({ target: 2, launched: 2, evicted: {} });
  });

  it('a parked instance past its maximum age that cannot be evicted still holds its place', async () => {
    aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags(), launchTime: new Date(0) });
    aws.fault('TerminateInstances', awsError('UnauthorizedOperation'));
    const [summary] = await handler(fleetConfig({ warmSize: 1 }))();
    expect(summary).toMatchObject({ target: 1, launched: 0, evicted: {} });
  });

  // TerminateInstances is sent as idempotent: six attempts, each answer lost.
  const everyAttempt = <T>(fault: () => T): T[] => Array.from({ length: 6 }, fault);
  const maxAged = () => aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags(), launchTime: new Date(0) });

  it('a terminate that ran but whose every answer was lost is observed as terminating: counted as evicted, marker removed, its place launched', async () => {
    const old = maxAged();
    aws.fault('TerminateInstances', ...everyAttempt(() => lostAnswer()));
    const [summary] = await handler(fleetConfig({ warmSize: 1 }))();
    expect(aws.count('TerminateInstances')).toBe(6);
    expect(aws.instances.get(old.id)!.state).toBe('terminated');
    expect(summary).toMatchObject({ target: 1, launched: 1, evicted: { 'max-age': 1 } });
    expect(lines.logs(/^terminate outcome unknown, resolved/)[0]).toMatchObject({ instances: 1, terminating: 1 });
    expect(lines.logs('evicted')[0]).toMatchObject({ instanceId: old.id, reason: 'max-age' });
    expect(markers()).toEqual([]);
  });

  it('a terminate whose every answer was lost and that did not run is observed as still stopped: it holds its place and its marker is released', async () => {
    const old = maxAged();
    aws.fault('TerminateInstances', ...everyAttempt(() => awsError('ServiceUnavailable', 503)));
    const [summary] = await handler(fleetConfig({ warmSize: 1 }))();
    expect(aws.instances.get(old.id)!.state).toBe('stopped');
    expect(summary).toMatchObject({ target: 1, launched: 0, evicted: {} });
    expect(lines.logs(/^terminate outcome unknown, resolved/)[0]).toMatchObject({ instances: 1, terminating: 0 });
    expect(aws.parameters.size).toBe(0);
  });

  it('a terminate refused outright is observed as still stopped: the instance stays and its marker is released', async () => {
    const old = maxAged();
    aws.fault('TerminateInstances', awsError('UnauthorizedOperation'));
    const [summary] = await handler(fleetConfig({ warmSize: 1 }))();
    expect(aws.count('TerminateInstances')).toBe(1);
    expect(aws.instances.get(old.id)!.state).toBe('stopped');
    expect(summary).toMatchObject({ target: 1, launched: 0, evicted: {} });
    expect(lines.logs('terminating evicted instances failed')).toHaveLength(1);
    expect(aws.parameters.size).toBe(0);
  });

  // Only the last attempt's error reaches the pool: a first attempt that ran and lost its
  // answer, then throttling on every retry, must not read as "terminated nothing".
  it('a terminate that ran, lost its answer, then was throttled past its retries is observed as terminating', async () => {
    const old = maxAged();
    aws.fault('TerminateInstances', lostAnswer(), ...Array.from({ length: 5 }, () => awsError('RequestLimitExceeded', 503)));
    const [summary] = await handler(fleetConfig({ warmSize: 1 }))();
    expect(aws.count('TerminateInstances')).toBe(6);
    expect(aws.instances.get(old.id)!.state).toBe('terminated');
    expect(summary).toMatchObject({ target: 1, launched: 1, evicted: { 'max-age': 1 } });
    expect(markers()).toEqual([]);
  });

  it('a look under the lock that fails evicts nothing and still releases the marker before the run fails', async () => {
    const old = maxAged();
    aws.fault('DescribeInstances', 'pass', ...everyAttempt(() => awsError('InternalError', 500)));
    const summaries = await handler(fleetConfig({ warmSize: 1 }))();
    expect(summaries).toEqual([]);
    expect(lines.logs('pool run failed')).toHaveLength(1);
    expect(aws.count('TerminateInstances')).toBe(0);
    expect(aws.instances.get(old.id)!.state).toBe('stopped');
    expect(aws.parameters.size).toBe(0);
  });

  it('a terminate whose outcome stays unknown because describing fails counts as not evicted and still releases the marker', async () => {
    maxAged();
    aws.fault('TerminateInstances', ...everyAttempt(() => lostAnswer()));
    aws.fault('DescribeInstances', 'pass', 'pass', ...everyAttempt(() => awsError('InternalError', 500)));
    const [summary] = await handler(fleetConfig({ warmSize: 1 }))();
    expect(summary).toMatchObject({ target: 1, launched: 0, evicted: {} });
    expect(lines.logs(/^terminate outcome unknown and describing failed/)).toHaveLength(1);
    expect(aws.parameters.size).toBe(0);
  });

  it('does not evict an instance scale-up claimed after the pool observed it', async () => {
    const i = parked();
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: 'scale-up', tags: {}, at: aws.now });
      throw awsError('ParameterAlreadyExists');
    });
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(aws.instances.get(i.id)!.state).toBe('stopped');
    expect(aws.parameters.get(paths.runnerConfig(i.id))!.value).toBe('scale-up');
  });

  it('does not evict an instance activated after the pool observed it (its config already consumed)', async () => {
    const i = parked();
    aws.fault('PutParameter', (input) => {
      i.state = 'running';
      i.tags.set(KEYS.activatedAt, '2026-11-29T11:59:59.000Z');
      aws.parameters.set(input.Name as string, { value: input.Value as string, tags: {}, at: aws.now });
      return {};
    });
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(i.state).toBe('running');
    expect(aws.count('TerminateInstances')).toBe(0);
    expect(aws.parameters.size).toBe(0);
  });

  it('a paused pool (maxRunners 0) keeps no standby: target 0 in force of its warm size and schedule, parked ones evicted, nothing launched', async () => {
    const kept = [parked(), parked()];
    // Its warm settings stay for when it resumes; a window in force (aws.now is Sunday 12:00) changes nothing.
    const config = fleetConfig({ maxRunners: 0, warmSize: 3, warmSchedule: [{ window: 'SUN 11:00-13:00', size: 5 }] });
    const [summary] = await handler(config)();
    expect(summary).toMatchObject({ target: 0, launched: 0, parked: 0, evicted: { 'over-target': 2 } });
    expect(aws.count('RunInstances')).toBe(0);
    for (const i of kept) expect(i.state).toBe('terminated');
    expect(lines.metric('TargetInstances', { Pool: 'linux' })).toBe(0);
    expect(markers()).toEqual([]);
    // Resumed: the next run refills to the target of the moment.
    const [resumed] = await handler(fleetConfig({ maxRunners: 10, warmSize: 3, warmSchedule: [{ window: 'SUN 11:00-13:00', size: 5 }], primeFailureLimit: 5 }))();
    expect(resumed).toMatchObject({ target: 5, launched: 5 });
  });

  it('never evicts a claimed instance, even one over the target', async () => {
    const i = parked();
    aws.parameters.set(paths.runnerConfig(i.id), { value: 'x', tags: {}, at: aws.now });
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(aws.count('PutParameter')).toBe(0);
    expect(i.state).toBe('stopped');
  });

  it('a pool whose standbys fail to prime backs off: failure reason logged and tagged, streak stored, metric emitted, resumes when one primes', async () => {
    const config = fleetConfig({ warmSize: 2, primeFailureLimit: 2, primeBackoffCapSeconds: 3600, primingTimeoutSeconds: 900 });
    const state = paths.primeState('linux');
    // Two standbys that never parked (their PRIME failed), past the priming timeout.
    const old = new Date(aws.now.getTime() - 901_000);
    const failed = [0, 1].map(() => aws.addInstance({ state: 'running', tags: standbyTags(), launchTime: old }));
    const [first] = await handler(config)();
    expect(first).toMatchObject({ launched: 0, evicted: { 'priming-timeout': 2 } });
    for (const f of failed) {
      expect(f.state).toBe('terminated');
      expect(f.tags.get(KEYS.primeFailure)).toBe('did not park within 900s');
    }
    expect(lines.logs('prime failed').map((l) => l.instanceId)).toEqual(failed.map((f) => f.id));
    expect(lines.logs('prime failed')[1]).toMatchObject({ reason: 'did not park within 900s', failuresInARow: 2, pool: 'linux' });
    expect(lines.metric('PrimeBackoff', { Pool: 'linux' })).toBe(1);
    expect(JSON.parse(aws.parameters.get(state)!.value)).toMatchObject({ failures: 2, lastInstanceId: failed[1]!.id });

    // Within the cap: nothing launches, the metric says so again.
    lines = new Lines();
    aws.now = new Date(aws.now.getTime() + 3599_000);
    expect((await handler(config)())[0]).toMatchObject({ launched: 0 });
    expect(lines.metric('PrimeBackoff', { Pool: 'linux' })).toBe(1);
    expect(lines.logs('prime back-off: holding launches back')[0]).toMatchObject({ wanted: 2, launching: 0, lastReason: 'did not park within 900s' });

    // At the cap: one probe.
    aws.now = new Date(aws.now.getTime() + 1000);
    expect((await handler(config)())[0]).toMatchObject({ launched: 1 });
    const probe = [...aws.instances.values()].find((i) => i.state === 'pending')!;

    // The probe primes: the streak ends and the pool fills up again.
    probe.state = 'stopped';
    probe.reason = 'Client.InstanceInitiatedShutdown';
    lines = new Lines();
    aws.now = new Date(aws.now.getTime() + 120_000);
    expect((await handler(config)())[0]).toMatchObject({ parked: 1, launched: 1 });
    expect(lines.metric('PrimeBackoff', { Pool: 'linux' })).toBe(0);
    expect(JSON.parse(aws.parameters.get(state)!.value)).toMatchObject({ failures: 0, proven: true });
  });

  it('a probe that primes and is taken by a job before any pool run sees it parked still ends the back-off', async () => {
    const config = fleetConfig({ warmSize: 2, primeFailureLimit: 2, primeBackoffCapSeconds: 3600, primingTimeoutSeconds: 900 });
    const old = new Date(aws.now.getTime() - 901_000);
    for (const _ of [0, 1]) aws.addInstance({ state: 'running', tags: standbyTags(), launchTime: old });
    await handler(config)();
    aws.now = new Date(aws.now.getTime() + 3600_000);
    expect((await handler(config)())[0]).toMatchObject({ launched: 1 });
    const probe = [...aws.instances.values()].find((i) => i.state === 'pending')!;

    // It parked, and scale-up activated it between two pool runs: never observed parked.
    probe.state = 'running';
    probe.tags.set(KEYS.activatedAt, aws.now.toISOString());
    probe.tags.set(KEYS.jobId, 'job-1');
    lines = new Lines();
    aws.now = new Date(aws.now.getTime() + 120_000);
    expect((await handler(config)())[0]).toMatchObject({ parked: 0, launched: 2 });
    expect(lines.metric('PrimeBackoff', { Pool: 'linux' })).toBe(0);
    expect(JSON.parse(aws.parameters.get(paths.primeState('linux'))!.value)).toMatchObject({ failures: 0, proven: true });
  });

  it('a standby taken by a job that ended (terminated) before any pool run saw it parked or active still proves the template', async () => {
    // A fresh template: the first fill launches its `limit` standbys on start tickets.
    const config = fleetConfig({ warmSize: 2, primeFailureLimit: 2, primingTimeoutSeconds: 900 });
    expect((await handler(config)())[0]).toMatchObject({ launched: 2 });
    const standbys = [...aws.instances.values()];
    // Both primed, were activated and ran a short job between two pool runs: gone, with the activation tags.
    for (const [n, i] of standbys.entries()) {
      i.state = 'terminated';
      i.tags.set(KEYS.activatedAt, aws.now.toISOString());
      i.tags.set(KEYS.jobId, `job-${n}`);
    }
    lines = new Lines();
    aws.now = new Date(aws.now.getTime() + 60_000);
    expect((await handler(config)())[0]).toMatchObject({ parked: 0, launched: 2 });
    expect(lines.logs('prime back-off: launch tickets taken elsewhere')).toEqual([]);
    expect(JSON.parse(aws.parameters.get(paths.primeState('linux'))!.value)).toMatchObject({ failures: 0, proven: true });
  });

  it('a watched standby gone without activation tags (a failed prime, evicted) proves nothing', async () => {
    const config = fleetConfig({ warmSize: 2, primeFailureLimit: 2, primeBackoffCapSeconds: 3600, primingTimeoutSeconds: 900 });
    expect((await handler(config)())[0]).toMatchObject({ launched: 2 });
    // Neither parks: past the priming timeout, the next run evicts both (terminated, no activation tags).
    aws.now = new Date(aws.now.getTime() + 901_000);
    expect((await handler(config)())[0]).toMatchObject({ launched: 0, evicted: { 'priming-timeout': 2 } });
    aws.now = new Date(aws.now.getTime() + 60_000);
    await handler(config)();
    expect(JSON.parse(aws.parameters.get(paths.primeState('linux'))!.value)).toMatchObject({ failures: 2, proven: false });
  });

  it('launches nothing while the prime streak cannot be read', async () => {
    aws.fault('GetParameter', ...Array.from({ length: 10 }, () => awsError('ThrottlingException', 400)));
    expect((await handler(fleetConfig({ warmSize: 2 }))())[0]).toMatchObject({ launched: 0 });
    expect(lines.logs('reading the prime streak failed: no launches this run')).toHaveLength(1);
  });
});

describe('pool handler: launch tickets kept after an exception', () => {
  it('names each ticket it keeps (pool, key, owner token, expiry) when the launch after the take throws', async () => {
    const taken: Ticket[] = [];
    const released: Ticket[] = [];
    const tickets: LaunchTickets = {
      async take(pool, need, count, now) {
        const expiresAt = new Date(now.getTime() + need.holdSeconds * 1000).toISOString();
        taken.push(...need.slots.slice(0, count).map((slot, i) => ({ key: ticketKey(pool, need.template, slot), owner: `owner-${i}`, expiresAt })));
        return { taken, errors: [] };
      },
      async release(t) {
        released.push(t);
        return { released: true };
      },
      async spend() {
        return { spent: true };
      },
      async spendHeld() {
        return { spent: [], errors: [] };
      },
    };
    // A fresh (unproven) template takes start tickets; the pool's subnets then break the launch
    // itself with an exception (not an EC2 answer), after the take.
    const config = fleetConfig({ warmSize: 2, primeFailureLimit: 2 });
    const broken = { ...config, pools: config.pools.map((p) => ({ ...p, subnetIds: undefined as unknown as string[] })) };
    await createPoolHandler({ ec2: new EC2Client({}), ssm: new SSMClient({}), aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }), loadConfig: async () => broken, now: () => aws.now, sink: lines.sink, launchTickets: tickets })().catch(() => undefined);
    expect(taken).toHaveLength(2);
    expect(released).toEqual([]);
    expect(lines.logs('the launch after a launch ticket threw; the ticket is kept until its expiry')).toEqual(
      taken.map((t) => expect.objectContaining({ pool: 'linux', ticketKey: t.key, ticketOwner: t.owner, ticketExpiresAt: t.expiresAt, error: 'TypeError' })),
    );
  });
});

describe('pool handler: launch tickets given back', () => {
  it('releases the tickets of a refused launch at once, not one after another (each may resend with backoff)', async () => {
    let inFlight = 0;
    let most = 0;
    const released: Ticket[] = [];
    let gate!: () => void;
    const allStarted = new Promise<void>((resolve) => (gate = resolve));
    const tickets: LaunchTickets = {
      async take(pool, need, count, now) {
        const expiresAt = new Date(now.getTime() + need.holdSeconds * 1000).toISOString();
        return { taken: need.slots.slice(0, count).map((slot, i) => ({ key: ticketKey(pool, need.template, slot), owner: `owner-${i}`, expiresAt })), errors: [] };
      },
      async release(t) {
        most = Math.max(most, ++inFlight);
        if (most === 3) gate();
        // Each release waits until all three are in flight; sequential releases would never get there.
        await Promise.race([allStarted, new Promise((resolve) => setTimeout(resolve, 2000))]);
        inFlight--;
        released.push(t);
        return { released: true };
      },
      async spend() {
        return { spent: true };
      },
      async spendHeld() {
        return { spent: [], errors: [] };
      },
    };
    aws.fault('RunInstances', awsError('InvalidParameterValue'));
    const config = fleetConfig({ warmSize: 3, primeFailureLimit: 3 });
    const [summary] = await createPoolHandler({ ec2: new EC2Client({}), ssm: new SSMClient({}), aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }), loadConfig: async () => config, now: () => aws.now, sink: lines.sink, launchTickets: tickets })();
    expect(summary).toMatchObject({ launched: 0 });
    expect(released).toHaveLength(3);
    expect(most).toBe(3);
  });
});

describe('pool handler: reused instances (contract reuse.ts)', () => {
  const reuse = { maxJobs: 3, maxAgeSeconds: 6 * 3600 };
  const hoursAgo = (h: number) => new Date(aws.now.getTime() - h * 3600_000);
  /** Parked after a job: LaunchTime is that job's start; the interface attach time its first launch. */
  const parkedReused = (tags: Record<string, string> = {}, builtHoursAgo = 1) =>
    aws.addInstance({
      state: 'stopped',
      reason: 'Client.InstanceInitiatedShutdown',
      launchTime: new Date(aws.now.getTime() - 60_000),
      firstLaunchTime: hoursAgo(builtHoursAgo),
      tags: { ...standbyTags(), [KEYS.affinity]: 'github:acme/app', [KEYS.uses]: '1', ...tags },
    });

  it('counts parked reused instances against the target and reports them apart', async () => {
    parkedReused();
    parkedReused({ [KEYS.affinity]: 'github:acme/web' });
    const [summary] = await handler(fleetConfig({ warmSize: 3, reuse }))();
    expect(summary).toMatchObject({ target: 3, parked: 2, parkedReused: 2, launched: 1, evicted: {} });
    expect(lines.metric('ParkedInstances', { Pool: 'linux' })).toBe(2);
    expect(lines.metric('ParkedReused', { Pool: 'linux' })).toBe(2);
  });

  it('evicts reused instances when reuse is switched off, under the eviction lock, and leaves no marker', async () => {
    const r = parkedReused();
    const [summary] = await handler(fleetConfig({ warmSize: 1 }))();
    expect(summary).toMatchObject({ evicted: { 'reuse-off': 1 } });
    // The marker, the eviction, then the prime streak that watches the standby launched in its place.
    expect(aws.calls.filter((c) => c === 'PutParameter' || c === 'TerminateInstances')).toEqual(['PutParameter', 'TerminateInstances', 'PutParameter']);
    expect(aws.instances.get(r.id)!.state).toBe('terminated');
    expect(lines.metric('Evictions', { Pool: 'linux', Reason: 'reuse-off' })).toBe(1);
    expect(lines.logs('evicted')[0]).toMatchObject({ instanceId: r.id, reason: 'reuse-off' });
    expect(markers()).toEqual([]);
  });

  it.each([
    ['its use count reached maxJobs', { [KEYS.uses]: '3' }, 1],
    ['its first launch (the interface attach time) is older than maxAge, its LaunchTime a minute ago', {}, 7],
  ])('evicts a reused instance as reuse-limit when %s', async (_name, tags, built) => {
    const r = parkedReused(tags, built);
    const keep = parkedReused({ [KEYS.affinity]: 'github:acme/web' });
    const [summary] = await handler(fleetConfig({ warmSize: 2, reuse }))();
    expect(summary).toMatchObject({ evicted: { 'reuse-limit': 1 }, parked: 1 });
    expect(aws.instances.get(r.id)!.state).toBe('terminated');
    expect(aws.instances.get(keep.id)!.state).toBe('stopped');
    expect([...aws.parameters.keys()].filter((n) => n.startsWith(paths.runnerConfigRoot))).toEqual([]);
  });

  it('never evicts a reused instance under an idle-stop marker or a claim, whatever its limits', async () => {
    const marked = parkedReused({ [KEYS.uses]: '99' }, 99);
    const claimed = parkedReused({ [KEYS.uses]: '99' }, 99);
    aws.parameters.set(paths.runnerConfig(marked.id), { value: 'idle-stop=x activation=y job=z', tags: {}, at: aws.now, type: 'String' });
    aws.parameters.set(paths.runnerConfig(claimed.id), { value: 'config', tags: {}, at: aws.now, type: 'SecureString' });
    await handler(fleetConfig({ warmSize: 0 }))();
    expect(aws.count('PutParameter')).toBe(0);
    expect(aws.count('TerminateInstances')).toBe(0);
    expect([marked, claimed].map((i) => aws.instances.get(i.id)!.state)).toEqual(['stopped', 'stopped']);
    expect(aws.parameters.size).toBe(2);
  });

  it('does not evict a reused instance claimed for a job of its affinity after the pool observed it', async () => {
    const r = parkedReused({ [KEYS.uses]: '3' });
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: 'scale-up', tags: {}, at: aws.now });
      throw awsError('ParameterAlreadyExists');
    });
    await handler(fleetConfig({ warmSize: 0, reuse }))();
    expect(aws.instances.get(r.id)!.state).toBe('stopped');
    expect(aws.count('TerminateInstances')).toBe(0);
    expect(aws.parameters.get(paths.runnerConfig(r.id))!.value).toBe('scale-up');
  });

  it('leaves a reused instance on its way to park alone, even long after its job started, within the park window of its parking tag', async () => {
    const parking = aws.addInstance({
      state: 'running',
      launchTime: hoursAgo(3),
      firstLaunchTime: hoursAgo(4),
      tags: { ...standbyTags(), [KEYS.affinity]: 'github:acme/app', [KEYS.uses]: '1', [KEYS.parking]: encodeParking('2026-01-01T00:00:00.000Z', new Date(Date.now() - 60_000)) },
    });
    const [summary] = await handler(fleetConfig({ warmSize: 1, reuse, primingTimeoutSeconds: 900 }))();
    expect(summary).toMatchObject({ evicted: {}, priming: 1, launched: 0 });
    expect(parking.state).toBe('running');
    expect(lines.logs('prime failed')).toEqual([]);
  });

  it('evicts a reused instance that never powers off: past its parking window and the priming bound from its last start', async () => {
    const stuck = aws.addInstance({
      state: 'running',
      launchTime: hoursAgo(3),
      firstLaunchTime: hoursAgo(4),
      tags: { ...standbyTags(), [KEYS.affinity]: 'github:acme/app', [KEYS.uses]: '1', [KEYS.parking]: encodeParking('2026-01-01T00:00:00.000Z', hoursAgo(1)) },
    });
    const [summary] = await handler(fleetConfig({ warmSize: 1, reuse, primingTimeoutSeconds: 900 }))();
    expect(summary).toMatchObject({ evicted: { 'priming-timeout': 1 } });
    expect(stuck.state).not.toBe('running');
  });
});
