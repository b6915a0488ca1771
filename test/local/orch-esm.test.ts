import { CreateLaunchTemplateCommand, DescribeSubnetsCommand, RunInstancesCommand } from '@aws-sdk/client-ec2';
import { CreateQueueCommand, GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { PutParameterCommand } from '@aws-sdk/client-ssm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildFleetConfig, ssmPaths, tagKeys, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { clearFleetConfigCache } from '../../lambdas/shared/fleet-config-source';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { githubWorkflowJobQueued } from '../../local/deliveries';
import type { LocalEvent } from '../../local/events';
import { createJobRecordTable } from '../../local/job-record-table';
import { LocalLambdas, localClients, type LocalAwsClients } from '../../local/lambdas';
import { findLeftovers, observeWorld } from '../../local/report';
import { startMoto, type MotoServer } from '../support/moto';
import { scaled } from '../support/slowdown';

/**
 * The in-process triggers against moto and the loopback GitHub: a Function URL delivery is
 * queued, the event source mapping hands it to scale-up, deletes what scale-up reports done,
 * and leaves a failed message to reappear after the visibility timeout until the redrive
 * policy moves it to the dead-letter queue, where the report finds it.
 */
let moto: MotoServer;
let github: LoopbackGitHub;
let c: LocalAwsClients;
let config: FleetConfig;
let lambdas: LocalLambdas;
let queueUrl: string;
let dlqUrl: string;
const events: LocalEvent[] = [];
const SECRET = 'local-webhook-secret';

beforeAll(async () => {
  moto = await startMoto();
  github = await startLoopbackGitHub({ organization: 'example-org', appId: '123456', onEvent: (e) => events.push(e) });
  c = localClients(moto.endpoint);
  const subnet = (await c.ec2.send(new DescribeSubnetsCommand({}))).Subnets![0]!.SubnetId!;
  const lt = await c.ec2.send(new CreateLaunchTemplateCommand({ LaunchTemplateName: 'esm', LaunchTemplateData: { ImageId: 'ami-12c6146b' } }));
  config = buildFleetConfig({
    prefix: 'esm',
    github: { appId: '123456', organization: 'example-org', apiUrl: github.url },
    pools: [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], launchTemplateId: lt.LaunchTemplate!.LaunchTemplateId!, launchTemplateVersion: '1', subnetIds: [subnet], instanceTypes: ['t3.micro'] }],
  });
  const p = ssmPaths(config.prefix);
  for (const [Name, Value, Type] of [
    [p.fleetConfig, JSON.stringify(config), 'String'],
    [p.github.appPrivateKey, github.privateKeyPem, 'SecureString'],
    [p.github.webhookSecret, SECRET, 'SecureString'],
  ] as const)
    await c.ssm.send(new PutParameterCommand({ Name, Value, Type }));
  const dlq = await c.sqs.send(new CreateQueueCommand({ QueueName: 'esm-dlq.fifo', Attributes: { FifoQueue: 'true' } }));
  const arn = (await c.sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq.QueueUrl!, AttributeNames: ['QueueArn'] }))).Attributes!.QueueArn!;
  // A short visibility timeout and two receives: the redrive happens within the test.
  const q = await c.sqs.send(
    new CreateQueueCommand({ QueueName: 'esm.fifo', Attributes: { FifoQueue: 'true', VisibilityTimeout: '1', RedrivePolicy: JSON.stringify({ deadLetterTargetArn: arn, maxReceiveCount: 2 }) } }),
  );
  queueUrl = q.QueueUrl!;
  dlqUrl = dlq.QueueUrl!;
  await createJobRecordTable(moto.endpoint, 'esm-job-records');
  clearFleetConfigCache();
  lambdas = new LocalLambdas({
    endpoint: moto.endpoint,
    fleetConfigParameter: p.fleetConfig,
    queueUrl,
    deadLetterQueueUrl: dlqUrl,
    instanceArnPrefix: 'arn:aws:ec2:us-east-1:123456789012:instance/',
    onEvent: (e) => events.push(e),
    sweepGraceSeconds: 5,
    jobRecordTable: 'esm-job-records',
  });
});
afterAll(async () => {
  await github?.close();
  await moto?.stop();
});

async function queueDepth(): Promise<number> {
  const out = await c.sqs.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }));
  return Number(out.Attributes!.ApproximateNumberOfMessages) + Number(out.Attributes!.ApproximateNumberOfMessagesNotVisible);
}

describe('the event source mapping against moto', () => {
  it('deletes what scale-up served; a job that keeps failing reappears, then lands in the dead-letter queue', { timeout: scaled(60_000) }, async () => {
    const served = github.addJob('example-org/app', ['self-hosted', 'linux']);
    const doomed = github.addJob('example-org/app', ['self-hosted', 'linux']);
    const deliver = (job: typeof served) => lambdas.webhook(githubWorkflowJobQueued({ jobId: job.id, runId: job.runId, repository: job.repository, labels: job.labels }, SECRET));
    expect((await deliver(served)).statusCode).toBe(202);
    expect(await lambdas.pollQueue(1)).toBe(1);
    expect(await queueDepth()).toBe(0);
    expect(events.filter((e) => e.kind === 'started').map((e) => e.detail)).toEqual(['cold']);
    // The template is unproven: the cold launch took a launch ticket in the record table first.
    expect(lambdas.tickets.taken['scale-up']).toBe(1);

    // Every JIT config request fails from now on: each receive of the doomed job fails.
    github.failNext({ method: 'POST', path: /generate-jitconfig/ }, 500, 1_000);
    expect((await deliver(doomed)).statusCode).toBe(202);
    let receives = 0;
    for (let i = 0; i < 40 && (await queueDepth()) > 0; i++) receives += await lambdas.pollQueue(1);
    expect(receives).toBe(2);
    expect(await queueDepth()).toBe(0);
    const world = await observeWorld(c, config, { registrations: () => [], jobs: () => [] }, dlqUrl, {});
    expect(world.deadLetters).toEqual([{ traceId: expect.any(String), jobId: `github:${doomed.id}`, reason: 'redrive (retries exhausted)' }]);
    expect(lambdas.counters).toMatchObject({ messagesReceived: 3, messagesFailed: 2 });
  });

  it('lists what no tag filter or top-level read would find: an untagged instance, a parameter below the config root', { timeout: scaled(60_000) }, async () => {
    const untagged = (await c.ec2.send(new RunInstancesCommand({ ImageId: 'ami-12c6146b', MinCount: 1, MaxCount: 1 }))).Instances![0]!.InstanceId!;
    const nested = `${ssmPaths(config.prefix).runnerConfigRoot.replace(/\/$/, '')}/nested/i-0123456789abcdef0`;
    await c.ssm.send(new PutParameterCommand({ Name: nested, Value: 'x=y', Type: 'String' }));
    const world = await observeWorld(c, config, { registrations: () => [], jobs: () => [] }, dlqUrl, {});
    expect(world.instances.map((i) => i.id)).toContain(untagged);
    expect(world.parameters).toContain(nested);
    const left = findLeftovers(config, tagKeys(config.prefix), world);
    expect(left.instances).toContainEqual({ id: untagged, pool: '-', state: 'running', why: 'no pool tag' });
    expect(left.parameters).toContain(nested);
  });
});
