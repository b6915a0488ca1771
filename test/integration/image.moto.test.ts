import { CreateImageCommand, DescribeInstancesCommand, RunInstancesCommand, StopInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { GetParameterCommand, PutParameterCommand } from '@aws-sdk/client-ssm';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import type { FleetConfig } from '../../lambdas/shared/contract';
import { KEYS, Lines, standbyTags } from '../support/fixtures';
import { startMoto, type MotoServer } from '../support/moto';
import { motoClients, motoFleet, parkInMoto, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

// A pool whose launch template resolves its AMI from a RunnerImage's parameter (moto's launch
// template holds a fixed AMI instead: the pool reads the parameter either way).
const PARAMETER = '/warm-runners/images/test-github-x86_64';
let moto: MotoServer;
let c: MotoClients;

beforeAll(async () => {
  moto = await startMoto();
  c = motoClients(moto.endpoint);
});
afterAll(async () => moto?.stop());

async function instance(id: string): Promise<Instance> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
  return out.Reservations![0]!.Instances![0]!;
}

/** Publishes `imageId` as Image Builder's distribution does, in a later second than `after` (LaunchTime has whole seconds). */
async function publish(imageId: string, after: Date): Promise<void> {
  for (;;) {
    await c.ssm.send(new PutParameterCommand({ Name: PARAMETER, Value: imageId, Type: 'String', DataType: 'aws:ec2:image', Overwrite: true }));
    const written = (await c.ssm.send(new GetParameterCommand({ Name: PARAMETER }))).Parameter!.LastModifiedDate!;
    if (Math.floor(written.getTime() / 1000) > Math.floor(after.getTime() / 1000)) return;
    await sleep(100);
  }
}

describe('a pool following an image parameter, against moto', () => {
  it('evicts the parked instance built from the old image after a new one is published, keeps the current one', { timeout: scaled(60_000) }, async () => {
    const config: FleetConfig = await motoFleet(c, { warmSize: 2, imageParameter: PARAMETER });
    const pool = config.pools[0]!;
    const lines = new Lines();
    const run = async () => (await createPoolHandler({ ...c, aws: new AwsCaller({ sleep: async () => {} }), loadConfig: async () => config, sink: lines.sink })())[0]!;

    // Parked on the image the parameter names: kept.
    const [old] = await parkInMoto(c, config, 1);
    const oldImage = (await instance(old!)).ImageId!;
    await publish(oldImage, new Date(0));
    expect((await run()).evicted).toEqual({});
    const filler = (await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: `tag:${KEYS.pool}`, Values: [pool.name] }, { Name: 'instance-state-name', Values: ['pending', 'running'] }] })))
      .Reservations!.flatMap((r) => r.Instances!).map((i) => i.InstanceId!);
    expect(filler).toHaveLength(1);
    await c.ec2.send(new StopInstancesCommand({ InstanceIds: filler }));

    // A new image is built and published; one standby is then launched from it.
    const { ImageId: newImage } = await c.ec2.send(new CreateImageCommand({ InstanceId: old!, Name: 'runner-image-2' }));
    await publish(newImage!, (await instance(filler[0]!)).LaunchTime!);
    const launched = await c.ec2.send(
      new RunInstancesCommand({
        MinCount: 1,
        MaxCount: 1,
        ImageId: newImage!,
        LaunchTemplate: { LaunchTemplateId: pool.launchTemplateId, Version: pool.launchTemplateVersion },
        SubnetId: pool.subnetIds[0],
        TagSpecifications: [{ ResourceType: 'instance', Tags: Object.entries(standbyTags()).filter(([k]) => !k.startsWith('aws:')).map(([Key, Value]) => ({ Key, Value })) }],
      }),
    );
    const current = launched.Instances![0]!.InstanceId!;
    await c.ec2.send(new StopInstancesCommand({ InstanceIds: [current] }));

    // The two standbys of the old image go, the one of the new image stays, one is launched.
    const summary = await run();
    expect(summary.evicted).toEqual({ 'stale-image': 2 });
    expect((await instance(old!)).State!.Name).toBe('terminated');
    expect((await instance(filler[0]!)).State!.Name).toBe('terminated');
    expect((await instance(current)).State!.Name).toBe('stopped');
    expect(summary).toMatchObject({ parked: 1, launched: 1 });
    expect(lines.metric('Evictions', { Reason: 'stale-image' })).toBe(2);

    // moto's template still holds the old AMI, so the refill shows it: launched after the
    // publication, it is not evicted (no evict-and-relaunch loop on a lagging resolution).
    expect((await run()).evicted).toEqual({});
  });
});
