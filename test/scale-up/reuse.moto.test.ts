import { CreateTagsCommand, DescribeInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { GetParameterCommand } from '@aws-sdk/client-ssm';
import { describe, expect, it } from 'vitest';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { affinityOf, decodeRunnerConfig, ssmPaths, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX } from '../support/fixtures';
import { motoFleet, parkInMoto } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

/**
 * Scale-up's side of reuse against moto: a reusable pool's job claims the parked instance
 * that carries its affinity (written by scale-up's activation or cold launch: the instance role
 * cannot; the instance writes its use count when it parks) over a fresh standby, and never one
 * of another affinity.
 */
const paths = ssmPaths(PREFIX);
let config: FleetConfig;
const { c } = motoForFile(async (m) => {
  config = await motoFleet(m.c, { reuse: { maxJobs: 5 } });
});

function handler(ci: FakeCi, lines: Lines) {
  return createScaleUpHandler({
    ...c,
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) }),
    loadConfig: async () => config,
    providers: () => ({ github: ci }),
    queueUrl: 'unused',
    deadLetterQueueUrl: 'unused',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    sink: lines.sink,
  });
}

async function described(ids: string[]): Promise<Map<string, Instance>> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ InstanceIds: ids }));
  return new Map((out.Reservations ?? []).flatMap((r) => r.Instances ?? []).map((i) => [i.InstanceId!, i]));
}

describe('scale-up reuse against moto', () => {
  it('claims the parked instance of the job\'s affinity over a fresh one, with its use count in the config; another affinity\'s stays parked', async () => {
    const [fresh, mine, foreign] = await parkInMoto(c, config, 3);
    const a = affinityOf(job(1));
    // The tags a served instance parks with: the affinity its activation wrote, the uses it wrote at park.
    await c.ec2.send(new CreateTagsCommand({ Resources: [mine!], Tags: [{ Key: KEYS.affinity, Value: a }, { Key: KEYS.uses, Value: '2' }] }));
    await c.ec2.send(new CreateTagsCommand({ Resources: [foreign!], Tags: [{ Key: KEYS.affinity, Value: 'github:acme/other' }, { Key: KEYS.uses, Value: '1' }] }));
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const lines = new Lines();
    expect((await handler(ci, lines)(jobEvent([job(1)]))).batchItemFailures).toEqual([]);

    const seen = await described([fresh!, mine!, foreign!]);
    expect(seen.get(mine!)!.State?.Name).toMatch(/^(pending|running)$/);
    expect(seen.get(fresh!)!.State?.Name).toBe('stopped');
    expect(seen.get(foreign!)!.State?.Name).toBe('stopped');
    const param = await c.ssm.send(new GetParameterCommand({ Name: paths.runnerConfig(mine!), WithDecryption: true }));
    expect(decodeRunnerConfig(param.Parameter!.Value!)).toMatchObject({ instanceId: mine, reuse: { affinity: a, uses: 2 } });
    expect(ci.scoped.size).toBe(1);
    expect(lines.metric('ReuseHits', { Pool: 'linux' })).toBe(1);

    // The next job of the same repository finds no other instance of its affinity: the fresh one, uses 0.
    expect((await handler(ci, lines)(jobEvent([job(2)]))).batchItemFailures).toEqual([]);
    const after = await described([fresh!, foreign!]);
    expect(after.get(fresh!)!.State?.Name).toMatch(/^(pending|running)$/);
    expect(after.get(foreign!)!.State?.Name).toBe('stopped');
    const second = await c.ssm.send(new GetParameterCommand({ Name: paths.runnerConfig(fresh!), WithDecryption: true }));
    expect(decodeRunnerConfig(second.Parameter!.Value!)).toMatchObject({ reuse: { affinity: a, uses: 0 } });
    // Its activation wrote the affinity it now serves under (the instance parks only under it).
    expect(after.get(fresh!)!.Tags).toContainEqual({ Key: KEYS.affinity, Value: a });
    expect(lines.metric('ReuseMisses', { Pool: 'linux' })).toBe(1);
  });
});
