import { DescribeInstancesCommand, StopInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { DeleteParameterCommand, GetParametersByPathCommand } from '@aws-sdk/client-ssm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { createScaleDownHandler } from '../../lambdas/scale-down/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { runnerName, ssmPaths, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX } from '../support/fixtures';
import { startMoto, type MotoServer } from '../support/moto';
import { motoClients, motoFleet, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

const paths = ssmPaths(PREFIX);
let moto: MotoServer;
let c: MotoClients;

beforeAll(async () => {
  moto = await startMoto();
  c = motoClients(moto.endpoint);
});
afterAll(async () => moto?.stop());

const tag = (i: Instance, key: string) => i.Tags?.find((t) => t.Key === key)?.Value;
async function all(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.pool] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}
async function paramNames(): Promise<string[]> {
  const out = await c.ssm.send(new GetParametersByPathCommand({ Path: paths.runnerConfigRoot }));
  return (out.Parameters ?? []).map((p) => p.Name!);
}

describe('the fleet against moto: fill, activate, cold-launch, evict, scale down, sweep', () => {
  it('runs a pool through its life', { timeout: scaled(60_000) }, async () => {
    let config: FleetConfig = await motoFleet(c, { warmSize: 3, maxRunners: 20, idleTimeoutSeconds: 1800 });
    const lines = new Lines();
    const aws = new AwsCaller({ sleep: async () => {} });
    let clock = new Date();
    const now = () => clock;
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const pool = () => createPoolHandler({ ...c, aws, loadConfig: async () => config, now, sink: lines.sink })();
    const scaleUp = createScaleUpHandler({ ...c, aws, loadConfig: async () => config, providers: () => ({ github: ci }), queueUrl: 'q', deadLetterQueueUrl: 'd', instanceArnPrefix: INSTANCE_ARN_PREFIX, now, sink: lines.sink });
    const scaleDown = () => createScaleDownHandler({ ...c, aws, loadConfig: async () => config, providers: () => ({ github: ci }), now, sink: lines.sink })();

    // Fill: three standbys launched, priming.
    expect((await pool())[0]).toMatchObject({ target: 3, parked: 0, priming: 0, launched: 3 });
    const standbys = (await all()).map((i) => i.InstanceId!);
    expect(standbys).toHaveLength(3);
    expect((await pool())[0]).toMatchObject({ parked: 0, priming: 3, launched: 0 });
    // Their priming boots power off; moto reports it as a user-initiated shutdown.
    await c.ec2.send(new StopInstancesCommand({ InstanceIds: standbys }));
    expect((await pool())[0]).toMatchObject({ parked: 3, priming: 0, launched: 0 });

    // Activate three, launch one cold.
    expect((await scaleUp(jobEvent([job(1), job(2), job(3), job(4)]))).batchItemFailures).toEqual([]);
    let instances = await all();
    const byJob = new Map(instances.filter((i) => tag(i, KEYS.jobId)).map((i) => [tag(i, KEYS.jobId)!, i]));
    expect(byJob.size).toBe(4);
    const warm = [1, 2, 3].map((n) => byJob.get(`github:${n}`)!);
    const cold = byJob.get('github:4')!;
    expect(warm.every((i) => standbys.includes(i.InstanceId!) && i.State?.Name === 'running')).toBe(true);
    expect(standbys).not.toContain(cold.InstanceId);
    // The pool refills around the activated instances and never touches them.
    expect((await pool())[0]).toMatchObject({ parked: 0, launched: 3 });

    // The warm instances boot and consume their configs.
    for (const i of warm) await c.ssm.send(new DeleteParameterCommand({ Name: paths.runnerConfig(i.InstanceId!) }));
    // Job 1 finished (its ephemeral runner is gone), job 2 is busy, job 3's runner sat idle,
    // the cold instance never got its job either; plus a registration whose instance is gone.
    const runnerOf = (i: Instance) => tag(i, KEYS.runnerId)!;
    ci.runners.delete(runnerOf(warm[0]!));
    ci.runners.get(runnerOf(warm[1]!))!.busy = true;
    ci.runners.set('orphan', { runnerId: 'orphan', name: runnerName(PREFIX, 'i-00000000000000abc', clock), status: 'offline', busy: false, instanceId: 'i-00000000000000abc', jobId: 'x' });
    clock = new Date(clock.getTime() + 31 * 60_000);

    // The first idle reading only marks the idle runners' instances (job 3's, the cold one);
    // the second, past the confirmation window, reclaims them.
    const first = await scaleDown();
    expect(first.terminated).toBe(1);
    expect((await all()).filter((i) => tag(i, KEYS.idleSince) !== undefined).map((i) => i.InstanceId).sort()).toEqual([warm[2]!.InstanceId, cold.InstanceId].sort());
    clock = new Date(clock.getTime() + 3 * 60_000);
    const swept = await scaleDown();
    instances = await all();
    const state = (id: string) => instances.find((i) => i.InstanceId === id)!.State!.Name;
    expect(state(warm[0]!.InstanceId!)).toBe('terminated');
    expect(state(warm[1]!.InstanceId!)).toBe('running');
    expect(state(warm[2]!.InstanceId!)).toBe('terminated');
    expect(state(cold.InstanceId!)).toBe('terminated');
    expect(first.terminated + swept.terminated).toBe(3);
    expect(ci.runners.has('orphan')).toBe(false);
    expect(ci.runners.has(runnerOf(warm[2]!))).toBe(false);
    expect(lines.metric('Sweeps', { Reason: 'idle' })).toBe(2);
    expect(lines.metric('Sweeps', { Reason: 'job-finished' })).toBe(1);
    expect(lines.metric('Sweeps', { Reason: 'no-instance' })).toBe(1);
    // The cold instance's unread config (a runner secret) goes in the same run as its instance.
    expect(await paramNames()).not.toContain(paths.runnerConfig(cold.InstanceId!));
    expect(swept.parametersDeleted).toBe(1);
    expect(lines.metric('Sweeps', { Reason: 'instance-terminated' })).toBe(1);
    await scaleDown();

    // A new template version: the pool evicts every standby built from the old one.
    const fresh = (await all()).filter((i) => !tag(i, KEYS.jobId) && i.State?.Name !== 'terminated').map((i) => i.InstanceId!);
    expect(fresh).toHaveLength(3);
    await c.ec2.send(new StopInstancesCommand({ InstanceIds: fresh }));
    config = { ...config, pools: [{ ...config.pools[0]!, launchTemplateVersion: '2' }] };
    const evicted = (await pool())[0]!;
    expect(evicted.evicted).toEqual({ 'stale-template': 3 });
    instances = await all();
    expect(fresh.every((id) => instances.find((i) => i.InstanceId === id)!.State!.Name === 'terminated')).toBe(true);
    expect(lines.metric('Evictions', { Reason: 'stale-template' })).toBe(3);
    // The busy activated instance survived all of it.
    expect(instances.find((i) => i.InstanceId === warm[1]!.InstanceId)!.State!.Name).toBe('running');
  });
});
