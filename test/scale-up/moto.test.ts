import { CreateTagsCommand, DescribeInstancesCommand, type Instance, type Tag } from '@aws-sdk/client-ec2';
import { DeleteParameterCommand, GetParametersByPathCommand, ListTagsForResourceCommand, type Parameter } from '@aws-sdk/client-ssm';
import { CreateQueueCommand, GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { describe, expect, it } from 'vitest';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { decodeRunnerConfig, PARAMETER_INSTANCE_ARN_TAG, PARAMETER_INSTANCE_TAG, ssmPaths, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX, record, sqsEvent } from '../support/fixtures';
import { drainQueue, motoClients, motoFleet, parkInMoto, type MotoClients } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

const paths = ssmPaths(PREFIX);
let config: FleetConfig;
const { moto, c } = motoForFile(async (m) => {
  config = await motoFleet(m.c);
});

function handler(ci: FakeCi, clients: MotoClients = c, lines = new Lines(), now = () => new Date(), queues = { queueUrl: 'unused', deadLetterQueueUrl: 'unused' }) {
  return createScaleUpHandler({
    ...clients,
    now,
    // Production's call timeouts, scaled: moto on a loaded machine answers slower than AWS.
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) }),
    loadConfig: async () => config,
    providers: () => ({ github: ci }),
    ...queues,
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    sink: lines.sink,
  });
}

async function instances(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.pool] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}
const tag = (i: Instance, key: string) => i.Tags?.find((t) => t.Key === key)?.Value;

async function parameters(): Promise<Parameter[]> {
  const all: Parameter[] = [];
  let token: string | undefined;
  do {
    const out = await c.ssm.send(new GetParametersByPathCommand({ Path: paths.runnerConfigRoot, WithDecryption: true, ...(token ? { NextToken: token } : {}) }));
    all.push(...(out.Parameters ?? []));
    token = out.NextToken;
  } while (token);
  return all;
}

describe('scale-up against moto', () => {
  it('activates parked instances and launches the rest cold, each with its config', async () => {
    const parked = await parkInMoto(c, config, 2);
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const res = await handler(ci)(jobEvent([job(1), job(2), job(3)]));
    expect(res.batchItemFailures).toEqual([]);
    const all = await instances();
    const serving = all.filter((i) => i.State?.Name === 'running' && tag(i, KEYS.jobId));
    expect(serving.map((i) => tag(i, KEYS.jobId)).sort()).toEqual(['github:1', 'github:2', 'github:3']);
    expect(serving.filter((i) => parked.includes(i.InstanceId!))).toHaveLength(2);
    const params = new Map((await parameters()).map((p) => [p.Name!, p.Value!]));
    for (const i of serving) {
      const value = params.get(paths.runnerConfig(i.InstanceId!));
      expect(value).toBeDefined();
      expect(decodeRunnerConfig(value!)).toEqual({ provider: Provider.GITHUB, instanceId: i.InstanceId, jitConfig: `jit-secret-${tag(i, KEYS.runnerId)}` });
      // Warm and cold alike: the tags the instance role's IAM condition checks.
      const tags = await c.ssm.send(new ListTagsForResourceCommand({ ResourceType: 'Parameter', ResourceId: paths.runnerConfig(i.InstanceId!) }));
      expect(Object.fromEntries((tags.TagList ?? []).map((t) => [t.Key, t.Value]))).toEqual({
        [PARAMETER_INSTANCE_TAG]: i.InstanceId,
        [PARAMETER_INSTANCE_ARN_TAG]: `arn:aws:ec2:us-east-1:123456789012:instance/${i.InstanceId}`,
      });
    }
    // Redelivery: nothing new.
    expect((await handler(ci)(jobEvent([job(1), job(2), job(3)]))).batchItemFailures).toEqual([]);
    expect(await instances()).toHaveLength(all.length);
  });

  it('20 concurrent invocations, 20 jobs, 10 parked: exactly 10 warm and 10 cold, no double claim (x20)', { timeout: scaled(120_000) }, async () => {
    for (let round = 0; round < 20; round++) {
      if (round > 0) {
        await moto.reset();
        config = await motoFleet(c);
      }
      const parked = new Set(await parkInMoto(c, config, 10));
      const ci = new FakeCi(Provider.GITHUB, PREFIX);
      const results = await Promise.all(Array.from({ length: 20 }, (_, n) => handler(ci)(jobEvent([job(round * 100 + n)]))));
      expect(results.flatMap((r) => r.batchItemFailures)).toEqual([]);

      const serving = (await instances()).filter((i) => i.State?.Name === 'running' && tag(i, KEYS.jobId));
      const warm = serving.filter((i) => parked.has(i.InstanceId!));
      const cold = serving.filter((i) => !parked.has(i.InstanceId!));
      expect(warm).toHaveLength(10);
      expect(cold).toHaveLength(10);
      // Every job on exactly one instance, every instance with exactly one job.
      const jobs = serving.map((i) => tag(i, KEYS.jobId));
      expect(new Set(jobs).size).toBe(20);
      // The config on each instance is the one of the runner tagged on it: no one overwrote a claim.
      const params = new Map((await parameters()).map((p) => [p.Name!, p.Value!]));
      expect(params.size).toBe(20);
      for (const i of serving) {
        const runnerId = tag(i, KEYS.runnerId)!;
        expect(decodeRunnerConfig(params.get(paths.runnerConfig(i.InstanceId!))!)).toEqual({ provider: Provider.GITHUB, instanceId: i.InstanceId, jitConfig: `jit-secret-${runnerId}` });
        // Registered for this instance, or carried here from a parked one whose claim was refused.
        expect([i.InstanceId, ...parked]).toContain(ci.runners.get(runnerId)!.instanceId);
        expect(ci.runners.get(runnerId)!.jobId).toBe(tag(i, KEYS.jobId));
      }
      // One registration per job: a refused claim's was carried on, none was left behind.
      expect(ci.runners.size).toBe(20);
      expect(ci.created).toBe(20);
    }
  });

  it("a cold launch whose answer and token look-up were both lost is taken over by the message's next receive: one instance", async () => {
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    // Receive 1's clients: CreateFleet runs in moto and the caller hears a reset; every
    // DescribeInstances by launch token is reset before it reaches moto.
    const faulty = motoClients(moto.endpoint);
    const reset = () => Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
    let lost = 0;
    let failedLookUps = 0;
    faulty.ec2.middlewareStack.add(
      (next, context) => async (args) => {
        const filters = (args.input as { Filters?: { Name?: string }[] }).Filters ?? [];
        if (context.commandName === 'CreateFleetCommand') {
          await next(args);
          lost++;
          throw reset();
        }
        if (context.commandName === 'DescribeInstancesCommand' && filters.some((f) => f.Name === `tag:${KEYS.launchToken}`)) {
          failedLookUps++;
          throw reset();
        }
        return next(args);
      },
      { step: 'initialize' },
    );
    const body = JSON.stringify(job(1));
    const first = await handler(ci, faulty)(sqsEvent(record(body, { id: 'msg-1', receiveCount: 1 })));
    expect(first.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect([lost, failedLookUps > 0]).toEqual([1, true]);
    const launched = await instances();
    expect(launched).toHaveLength(1);
    expect(tag(launched[0]!, KEYS.runnerId)).toBeUndefined();
    // Receive 2, through clean clients: moto would launch a second instance for a new CreateFleet.
    const lines = new Lines();
    const second = await handler(ci, c, lines)(sqsEvent(record(body, { id: 'msg-1', receiveCount: 2 })));
    expect(second.batchItemFailures).toEqual([]);
    const after = await instances();
    expect(after.map((i) => i.InstanceId)).toEqual([launched[0]!.InstanceId]);
    expect(tag(after[0]!, KEYS.runnerId)).toBe('1');
    expect(ci.created).toBe(1);
    const params = new Map((await parameters()).map((p) => [p.Name!, p.Value!]));
    expect(decodeRunnerConfig(params.get(paths.runnerConfig(after[0]!.InstanceId!))!)).toMatchObject({ instanceId: after[0]!.InstanceId, jitConfig: 'jit-secret-1' });
    expect(lines.logs('taking over the instance an earlier receive of the message launched, instead of launching')).toHaveLength(1);
  });

  it('a slow competitor does not claim an instance whose config was already consumed', async () => {
    const [id] = await parkInMoto(c, config, 1);
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    // The slow invocation observes the parked instance, then stalls before its claim write.
    const slow = motoClients(moto.endpoint);
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let observed!: () => void;
    const hasObserved = new Promise<void>((r) => (observed = r));
    slow.ec2.middlewareStack.add(
      (next, context) => async (args) => {
        const out = await next(args);
        if (context.commandName === 'DescribeInstancesCommand') observed();
        return out;
      },
      { step: 'initialize' },
    );
    slow.ssm.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'PutParameterCommand') await gate;
        return next(args);
      },
      { step: 'initialize' },
    );
    const lines = new Lines();
    // Its clock: a config can only have been consumed after a boot, seconds after the claim
    // it belonged to, so the stall is at least that long.
    let skew = 0;
    const slowRun = handler(ci, slow, lines, () => new Date(Date.now() + skew))(jobEvent([job(2)]));
    await hasObserved;
    // Meanwhile the fast one activates it, and the instance boots, reads and deletes its config.
    expect((await handler(ci)(jobEvent([job(1)]))).batchItemFailures).toEqual([]);
    await c.ssm.send(new DeleteParameterCommand({ Name: paths.runnerConfig(id!) }));
    skew = 30_000;
    release();
    expect((await slowRun).batchItemFailures).toEqual([]);

    const all = await instances();
    const a = all.find((i) => i.InstanceId === id)!;
    expect(tag(a, KEYS.jobId)).toBe('github:1');
    expect(tag(a, KEYS.traceId)).toBe('trace-1');
    // The slow one's write was removed again, its runner deregistered, and its job went cold.
    expect((await parameters()).map((p) => p.Name)).not.toContain(paths.runnerConfig(id!));
    const other = all.find((i) => tag(i, KEYS.jobId) === 'github:2')!;
    expect(other.InstanceId).not.toBe(id);
    expect(lines.metric('LostClaims')).toBe(1);
    expect([...ci.runners.values()].map((r) => r.jobId).sort()).toEqual(['github:1', 'github:2']);
  });

  /**
   * Clients whose StartInstances is refused (so the warm activation of `id` rolls back) and
   * whose rollback sees its DeleteTags fail in the way `deleteTags` says, and its
   * TerminateInstances in the way `terminate` says: executed with its answer lost (a reset),
   * or refused without executing.
   */
  function rollbackFaults(id: string, deleteTags: 'late-create' | 'refused', terminate: 'lost' | 'refused'): MotoClients {
    const faulty = motoClients(moto.endpoint);
    const refused = (name: string) => Object.assign(new Error(`${name} (injected)`), { name, $metadata: { httpStatusCode: 403 } });
    let late: Tag[] | undefined;
    faulty.ec2.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { Resources?: string[]; InstanceIds?: string[]; Tags?: Tag[] };
        const ours = (input.Resources ?? input.InstanceIds ?? []).includes(id);
        if (!ours) return next(args);
        switch (context.commandName) {
          case 'CreateTagsCommand':
            late = input.Tags;
            return next(args);
          case 'StartInstancesCommand':
            throw refused('UnauthorizedOperation');
          case 'DeleteTagsCommand': {
            if (deleteTags === 'refused') throw refused('UnauthorizedOperation');
            const out = await next(args);
            // An earlier CreateTags of ours, its answer lost, lands after every delete.
            await c.ec2.send(new CreateTagsCommand({ Resources: [id], Tags: late }));
            return out;
          }
          case 'TerminateInstancesCommand':
            if (terminate === 'refused') throw refused('UnauthorizedOperation');
            await next(args);
            throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
          default:
            return next(args);
        }
      },
      { step: 'initialize' },
    );
    return faulty;
  }

  it('a rollback whose tags keep coming back retires the instance (every TerminateInstances answer lost, resolved by its state) and releases its claim', async () => {
    const [id] = await parkInMoto(c, config, 1);
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const lines = new Lines();
    const res = await handler(ci, rollbackFaults(id!, 'late-create', 'lost'), lines)(jobEvent([job(1)]));
    expect(res.batchItemFailures).toEqual([]);
    const all = await instances();
    const parked = all.find((i) => i.InstanceId === id)!;
    // Not a stopped standby that looks activated: terminated, with no claim left on it.
    expect(parked.State?.Name).toBe('terminated');
    expect(tag(parked, KEYS.jobId)).toBe('github:1');
    expect((await parameters()).map((p) => p.Name)).not.toContain(paths.runnerConfig(id!));
    expect(lines.logs(/terminating the instance gave no answer or failed/)).toHaveLength(1);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(0);
    // The job is served cold, by the only registration left.
    const serving = all.filter((i) => i.State?.Name === 'running' && tag(i, KEYS.jobId) === 'github:1');
    expect(serving).toHaveLength(1);
    expect([...ci.runners.values()].map((r) => r.runnerId)).toEqual([tag(serving[0]!, KEYS.runnerId)]);
  });

  it('a rollback that can neither remove its tags nor retire the instance keeps the claim: the next job does not take the instance', async () => {
    const [id] = await parkInMoto(c, config, 1);
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    const lines = new Lines();
    expect((await handler(ci, rollbackFaults(id!, 'refused', 'refused'), lines)(jobEvent([job(1)]))).batchItemFailures).toEqual([]);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(1);
    expect((await parameters()).map((p) => p.Name)).toContain(paths.runnerConfig(id!));
    // Another invocation, with working clients: the half-activated instance is not claimed.
    expect((await handler(ci)(jobEvent([job(2)]))).batchItemFailures).toEqual([]);
    const all = await instances();
    const parked = all.find((i) => i.InstanceId === id)!;
    expect(parked.State?.Name).toBe('stopped');
    expect(tag(parked, KEYS.jobId)).toBe('github:1');
    const served = all.filter((i) => i.State?.Name === 'running').map((i) => tag(i, KEYS.jobId)).sort();
    expect(served).toEqual(['github:1', 'github:2']);
  });

  it('a job the provider answers 404 for is retried and reaches the dead-letter queue after the redrive budget', async () => {
    const maxReceiveCount = 3;
    const dlq = (await c.sqs.send(new CreateQueueCommand({ QueueName: 'jobs-dlq.fifo', Attributes: { FifoQueue: 'true' } }))).QueueUrl!;
    const dlqArn = (await c.sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq, AttributeNames: ['QueueArn'] }))).Attributes!.QueueArn!;
    const queueUrl = (
      await c.sqs.send(
        new CreateQueueCommand({
          QueueName: 'jobs.fifo',
          Attributes: { FifoQueue: 'true', RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount }) },
        }),
      )
    ).QueueUrl!;
    await parkInMoto(c, config, 1);
    const ci = new FakeCi(Provider.GITHUB, PREFIX);
    ci.lookupNotFound.add('github:1');
    const unresolved = job(1, { labels: [], labelsResolved: false });
    delete (unresolved as { pool?: string }).pool;
    await c.sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify(unresolved), MessageGroupId: 'github:1', MessageDeduplicationId: 'd1' }));
    const lines = new Lines();
    const run = handler(ci, c, lines, undefined, { queueUrl, deadLetterQueueUrl: dlq });
    await drainQueue(c.sqs, queueUrl, run, maxReceiveCount + 2);
    const dead = (await c.sqs.send(new ReceiveMessageCommand({ QueueUrl: dlq, MaxNumberOfMessages: 10 }))).Messages ?? [];
    expect(dead.map((m) => JSON.parse(m.Body!).jobId)).toEqual(['github:1']);
    expect(ci.lookups).toBe(maxReceiveCount);
    expect(lines.metric('JobsFailed', { Reason: 'job-lookup-not-found' })).toBe(maxReceiveCount);
    expect(ci.created).toBe(0);
  });
});
