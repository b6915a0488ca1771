import { CreateTagsCommand, DescribeInstancesCommand, TerminateInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { GetParameterCommand } from '@aws-sdk/client-ssm';
import { CreateQueueCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { describe, expect, it } from 'vitest';
import { decodeStreak } from '../../lambdas/pool/backoff';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { WAIT_ATTRIBUTES } from '../../lambdas/scale-up/queue';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { coldLaunchTags, Provider, ssmPaths, type FleetConfig } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX } from '../support/fixtures';
import { motoFleet } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

/**
 * A cold launch that fails before its runner starts, end to end against moto: scale-up's real
 * CreateFleet (the contract's coldLaunchTags), the failure tag the boot script writes on its
 * way out (the same key and form; test/templates/install.bats shows the script writing it
 * through the real aws CLI), the pool counting it into the streak once, and scale-up then
 * holding the next jobs as wait copies instead of launching.
 */
let config: FleetConfig;
const { c } = motoForFile(async (m) => {
  config = await motoFleet(m.c, { warmSize: 0, primeFailureLimit: 3, primeBackoffCapSeconds: 3600 });
});
const paths = ssmPaths(PREFIX);

async function coldInstances(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.pool] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []).filter((i) => !i.Tags?.some((t) => t.Key === KEYS.warmStandby));
}

describe('a cold launch that fails before its runner starts, against moto', () => {
  it('carries the cold launch tags and its failure; the pool counts it once; scale-up then holds the next jobs', async () => {
    const aws = new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
    const queueUrl = (await c.sqs.send(new CreateQueueCommand({ QueueName: 'jobs.fifo', Attributes: { FifoQueue: 'true' } }))).QueueUrl!;
    const deadLetterQueueUrl = (await c.sqs.send(new CreateQueueCommand({ QueueName: 'jobs-dlq.fifo', Attributes: { FifoQueue: 'true' } }))).QueueUrl!;
    const lines = new Lines();
    const scaleUp = createScaleUpHandler({
      ...c,
      aws,
      loadConfig: async () => config,
      providers: () => ({ github: new FakeCi(Provider.GITHUB, PREFIX) }),
      queueUrl,
      deadLetterQueueUrl,
      instanceArnPrefix: INSTANCE_ARN_PREFIX,
      sink: lines.sink,
    });
    const pool = createPoolHandler({ ...c, aws, loadConfig: async () => config, sink: lines.sink });

    // 1. A fresh pool launches cold (unproven: up to the limit at once).
    expect((await scaleUp(jobEvent([job(1)]))).batchItemFailures).toEqual([]);
    const [launched] = await coldInstances();
    const id = launched!.InstanceId!;
    const tags = Object.fromEntries((launched!.Tags ?? []).map((t) => [t.Key, t.Value]));
    const expected = Object.fromEntries(coldLaunchTags(KEYS, 'linux', { jobId: 'github:1', traceId: job(1).traceId }, new Date(tags[KEYS.activatedAt]!), tags[KEYS.launchToken]!).map((t) => [t.Key, t.Value]));
    expect(tags).toMatchObject(expected);

    // 2. Its boot fails before the runner starts: the instance tags why, then terminates itself.
    await c.ec2.send(new CreateTagsCommand({ Resources: [id], Tags: [{ Key: KEYS.startFailure, Value: 'RUN failed: the runner package: refused nothing installed' }] }));
    await c.ec2.send(new TerminateInstancesCommand({ InstanceIds: [id] }));

    // 3. The pool counts it into the streak, once, however often it runs while it is in view.
    await pool();
    await pool();
    const stored = decodeStreak((await c.ssm.send(new GetParameterCommand({ Name: paths.primeState('linux') }))).Parameter?.Value);
    expect(stored).toMatchObject({ failures: 1, lastInstanceId: id, lastReason: 'cold launch: RUN failed: the runner package: refused nothing installed', countedStarts: [id] });
    expect(lines.logs('prime failed').filter((l) => l.instanceId === id)).toHaveLength(1);

    // 4. The next jobs launch nothing until the probe is due: each waits as a wait copy.
    const fresh = { receivedAt: new Date().toISOString() };
    expect((await scaleUp(jobEvent([job(2, fresh), job(3, fresh)]))).batchItemFailures).toEqual([]);
    expect(await coldInstances()).toHaveLength(1);
    const copies = await c.sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'] }));
    expect(copies.Messages).toHaveLength(2);
    const resumeAt = Date.parse(stored!.lastFailureAt!) + 60_000;
    for (const m of copies.Messages!) expect(Date.parse(m.MessageAttributes![WAIT_ATTRIBUTES.notBefore]!.StringValue!)).toBeGreaterThanOrEqual(resumeAt);
  });
});
