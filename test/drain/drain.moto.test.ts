import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CloudFormationClient, CreateStackCommand, DescribeStacksCommand, StackStatus } from '@aws-sdk/client-cloudformation';
import { CreateLaunchTemplateCommand, CreateTagsCommand, DescribeInstancesCommand, DescribeSubnetsCommand, DescribeVolumesCommand, RunInstancesCommand, StopInstancesCommand, type Instance } from '@aws-sdk/client-ec2';
import { DescribeRuleCommand, EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { GetEventSourceMappingCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { CreateQueueCommand, DeleteMessageBatchCommand, GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { GetParametersByPathCommand, PutParameterCommand } from '@aws-sdk/client-ssm';
import type { CloudFormationCustomResourceEvent, SQSEvent } from 'aws-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCiProviders } from '../../lambdas/ci';
import { createDrainHandlers, type IsCompleteEvent } from '../../lambdas/drain/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { buildFleetConfig, GitLabRunnerType, JOB_MESSAGE_SCHEMA_VERSION, Provider, ssmPaths, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { startLoopbackGitLab, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import { INSTANCE_ARN_PREFIX, KEYS, Lines, PREFIX, record, standbyTags } from '../support/fixtures';
import { motoEnv, startMoto, type MotoServer } from '../support/moto';
import { motoClients, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

const paths = ssmPaths(PREFIX);
const ORG = 'acme';
const GROUP = 12;
const PROJECT = 380;

let moto: MotoServer;
let c: MotoClients;
let gh: LoopbackGitHub;
let gl: LoopbackGitLab;
let tmp: string;

beforeAll(async () => {
  [moto, gh, gl] = await Promise.all([startMoto(), startLoopbackGitHub({ organization: ORG }), startLoopbackGitLab({ groupId: GROUP })]);
  c = motoClients(moto.endpoint);
  tmp = mkdtempSync(join(tmpdir(), 'drain-moto-'));
}, scaled(60_000));
afterAll(async () => {
  await Promise.all([moto?.stop(), gh?.close(), gl?.close()]);
  rmSync(tmp, { recursive: true, force: true });
});

/** The real aws CLI against moto, for the set-up CloudFormation does in production (a role, a function, its mapping, the rules). */
function cli(...args: string[]): Record<string, unknown> {
  const out = execFileSync('aws', [...args, '--output', 'json'], { env: { ...process.env, ...motoEnv(moto.endpoint) } }).toString();
  return out.trim() ? (JSON.parse(out) as Record<string, unknown>) : {};
}

/** The deployed shape the drain acts on: a FIFO jobs queue feeding scale-up through a mapping, two schedules. */
async function deployTriggers(): Promise<{ queueUrl: string; mapping: string; schedules: string[] }> {
  const queue = await c.sqs.send(new CreateQueueCommand({ QueueName: 'jobs.fifo', Attributes: { FifoQueue: 'true', ContentBasedDeduplication: 'true' } }));
  const queueUrl = queue.QueueUrl!;
  const attributes = await c.sqs.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['QueueArn'] }));
  const role = cli('iam', 'create-role', '--role-name', 'scale-up', '--assume-role-policy-document', '{}') as { Role: { Arn: string } };
  const zip = join(tmp, 'fn.zip');
  // The code moto stores; the test runs the real handler in-process.
  writeFileSync(join(tmp, 'index.js'), 'exports.handler = async () => {};\n');
  execFileSync('python3', ['-m', 'zipfile', '-c', zip, join(tmp, 'index.js')]);
  cli('lambda', 'create-function', '--function-name', 'scale-up', '--runtime', 'nodejs20.x', '--role', role.Role.Arn, '--handler', 'index.handler', '--zip-file', `fileb://${zip}`);
  const mapping = cli('lambda', 'create-event-source-mapping', '--function-name', 'scale-up', '--event-source-arn', attributes.Attributes!.QueueArn!, '--batch-size', '10') as { UUID: string };
  const schedules = ['pool-schedule', 'scale-down-schedule'];
  for (const name of schedules) cli('events', 'put-rule', '--name', name, '--schedule-expression', 'rate(1 minute)');
  return { queueUrl, mapping: mapping.UUID, schedules };
}

/** Two pools (GitHub and GitLab) on moto's launch template and default subnet, the CI services on loopback. */
async function deployFleet(): Promise<FleetConfig> {
  const subnets = await c.ec2.send(new DescribeSubnetsCommand({}));
  // The root volume as lib/runner-fleet.ts renders it: deleted with its instance, so a parked
  // instance's cache (reuse) goes with it.
  const LaunchTemplateData = {
    ImageId: 'ami-12c6146b',
    InstanceType: 't3.micro' as const,
    BlockDeviceMappings: [{ DeviceName: '/dev/xvda', Ebs: { VolumeSize: 30, VolumeType: 'gp3' as const, Encrypted: true, DeleteOnTermination: true } }],
  };
  const lt = await c.ec2.send(new CreateLaunchTemplateCommand({ LaunchTemplateName: 'runners', LaunchTemplateData }));
  const pool = { launchTemplateId: lt.LaunchTemplate!.LaunchTemplateId!, launchTemplateVersion: '1', subnetIds: [subnets.Subnets![0]!.SubnetId!], instanceTypes: ['t3.micro'], maxRunners: 10, warmSize: 2 };
  const config = buildFleetConfig({
    prefix: PREFIX,
    github: { appId: gh.appId, organization: ORG, apiUrl: gh.url },
    gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP },
    pools: [
      { name: 'linux', provider: Provider.GITHUB, labels: ['linux'], ...pool },
      { name: 'docker', provider: Provider.GITLAB, labels: ['docker'], runUntagged: false, ...pool },
    ],
  });
  // The CI credentials, as the operator puts them in (the Lambdas read them from SSM).
  await c.ssm.send(new PutParameterCommand({ Name: config.parameters.github.appPrivateKey, Value: gh.privateKeyPem, Type: 'SecureString' }));
  await c.ssm.send(new PutParameterCommand({ Name: config.parameters.gitlab.token, Value: gl.accessToken, Type: 'SecureString' }));
  // The pool's prime-failure state, as the pool Lambda leaves it.
  await c.ssm.send(new PutParameterCommand({ Name: paths.primeState('linux'), Value: '{"failuresInARow":1}', Type: 'String' }));
  return config;
}

/** Parked standbys of a pool, as the pool Lambda leaves them (stopped, with the standby tags). */
async function park(config: FleetConfig, poolName: string, n: number): Promise<string[]> {
  const pool = config.pools.find((p) => p.name === poolName)!;
  const out = await c.ec2.send(
    new RunInstancesCommand({
      MinCount: n,
      MaxCount: n,
      LaunchTemplate: { LaunchTemplateId: pool.launchTemplateId, Version: pool.launchTemplateVersion },
      SubnetId: pool.subnetIds[0],
      TagSpecifications: [{ ResourceType: 'instance', Tags: Object.entries(standbyTags(poolName)).filter(([k]) => !k.startsWith('aws:')).map(([Key, Value]) => ({ Key, Value })) }],
    }),
  );
  const ids = out.Instances!.map((i) => i.InstanceId!);
  await c.ec2.send(new StopInstancesCommand({ InstanceIds: ids }));
  return ids;
}

function githubJob(id: number, labels: string[]): JobMessage {
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITHUB,
    jobId: `github:${id}`,
    providerJobId: String(id),
    pool: 'linux',
    owner: ORG,
    project: 'app',
    labels,
    labelsResolved: true,
    traceId: `t-gh-${id}`,
    deliveryId: `d-gh-${id}`,
    receivedAt: new Date().toISOString(),
  };
}
function gitlabJob(id: number): JobMessage {
  return {
    schemaVersion: JOB_MESSAGE_SCHEMA_VERSION,
    provider: Provider.GITLAB,
    jobId: `gitlab:${id}`,
    providerJobId: String(id),
    pool: 'docker',
    owner: 'group',
    project: 'project',
    projectId: PROJECT,
    labels: ['docker'],
    labelsResolved: true,
    traceId: `t-gl-${id}`,
    deliveryId: `d-gl-${id}`,
    receivedAt: new Date().toISOString(),
  };
}

async function fleetInstances(): Promise<Instance[]> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.pool] }] }));
  return (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
}
/** The volumes attached to the instances (the root volume and moto's own), by id. */
async function volumesOf(instanceIds: string[]): Promise<string[]> {
  const out = await c.ec2.send(new DescribeVolumesCommand({ Filters: [{ Name: 'attachment.instance-id', Values: instanceIds }] }));
  return (out.Volumes ?? []).map((v) => v.VolumeId!);
}
async function parametersUnder(path: string): Promise<string[]> {
  const out = await c.ssm.send(new GetParametersByPathCommand({ Path: path, Recursive: true }));
  return (out.Parameters ?? []).map((p) => p.Name!);
}

const deleteEventOf = (StackId: string) => ({ RequestType: 'Delete', ServiceToken: 'arn', ResponseURL: 'https://cfn', StackId, RequestId: 'r', LogicalResourceId: 'Drain', PhysicalResourceId: 'drain', ResourceType: 'Custom::FleetDrain', ResourceProperties: { ServiceToken: 'arn' } }) as CloudFormationCustomResourceEvent;

describe('the drain against moto and the loopback GitHub and GitLab', () => {
  it('leaves zero fleet resources: no instance but terminated ones, no parameter under the fleet roots, no runner; a job queued during the drain launches nothing', { timeout: scaled(180_000) }, async () => {
    const triggers = await deployTriggers();
    const config = await deployFleet();
    const lines = new Lines();
    const aws = new AwsCaller({ sleep: async () => {} });
    const sdk = { endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' }, maxAttempts: 1 };
    const lambda = new LambdaClient(sdk);
    const events = new EventBridgeClient(sdk);
    const cloudformation = new CloudFormationClient(sdk);
    const providers = (() => {
      const built = createCiProviders(config, { ssm: c.ssm });
      return () => built;
    })();
    let clock = Date.now();
    const now = () => new Date(clock);
    const scaleUp = createScaleUpHandler({ ...c, aws, loadConfig: async () => config, providers, queueUrl: triggers.queueUrl, deadLetterQueueUrl: 'dlq', instanceArnPrefix: INSTANCE_ARN_PREFIX, now, sink: lines.sink });

    /**
     * Lambda's SQS poller, as the service runs it: while the mapping is enabled it receives
     * the queue's messages, invokes scale-up with them and deletes those it served.
     */
    const poll = async (): Promise<number> => {
      const mapping = await lambda.send(new GetEventSourceMappingCommand({ UUID: triggers.mapping }));
      if (mapping.State !== 'Enabled') return 0;
      const received = await c.sqs.send(new ReceiveMessageCommand({ QueueUrl: triggers.queueUrl, MaxNumberOfMessages: 10, AttributeNames: ['All'] }));
      const messages = received.Messages ?? [];
      if (messages.length === 0) return 0;
      const event: SQSEvent = { Records: messages.map((m) => ({ ...record(m.Body!, { id: m.MessageId! }), receiptHandle: m.ReceiptHandle! })) };
      const { batchItemFailures } = await scaleUp(event);
      const failed = new Set(batchItemFailures.map((f) => f.itemIdentifier));
      const served = messages.filter((m) => !failed.has(m.MessageId!));
      if (served.length > 0) await c.sqs.send(new DeleteMessageBatchCommand({ QueueUrl: triggers.queueUrl, Entries: served.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle! })) }));
      return served.length;
    };
    const send = (job: JobMessage) => c.sqs.send(new SendMessageCommand({ QueueUrl: triggers.queueUrl, MessageBody: JSON.stringify(job), MessageGroupId: job.jobId }));

    // The fleet as a destroy finds it: parked standbys of both pools, two of them activated for
    // jobs (running, with their config parameters and registrations), an orphan registration,
    // the pool's state parameter.
    const parkedGitHub = await park(config, 'linux', 2);
    const parkedGitLab = await park(config, 'docker', 2);
    const ghJob = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    const glJob = gl.addJob(PROJECT, ['docker']);
    await send(githubJob(ghJob.id, ghJob.labels));
    await send(gitlabJob(glJob.id));
    expect(await poll()).toBe(2);
    const activated = (await fleetInstances()).filter((i) => i.State?.Name === 'running');
    expect(activated.map((i) => i.InstanceId).sort()).toHaveLength(2);
    expect(activated.every((i) => [...parkedGitHub, ...parkedGitLab].includes(i.InstanceId!))).toBe(true);
    expect(gh.runners()).toHaveLength(1);
    expect(gl.runners()).toHaveLength(1);
    await providers().github!.createRunner(githubJob(999, ['self-hosted', 'linux']), 'i-00000000000000abc', 'linux');
    expect(gh.runners()).toHaveLength(2);
    expect(await parametersUnder(paths.runnerConfigRoot)).toHaveLength(2);
    expect(await parametersUnder(paths.poolStateRoot)).toEqual([paths.primeState('linux')]);
    // Reuse (contract reuse.ts): instances parked after a job with their caches (stopped, with
    // affinity and use count), one under an idle-stop marker (a String at its config name).
    const reused = await park(config, 'linux', 2);
    await c.ec2.send(new CreateTagsCommand({ Resources: reused, Tags: [{ Key: KEYS.affinity, Value: `github:${ORG}/app` }, { Key: KEYS.uses, Value: '2' }] }));
    await c.ssm.send(new PutParameterCommand({ Name: paths.runnerConfig(reused[0]!), Value: 'idle-stop=1 activation=x job=y', Type: 'String' }));
    const volumes = await volumesOf((await fleetInstances()).map((i) => i.InstanceId!));
    expect(volumes.length).toBeGreaterThanOrEqual(6);

    const drain = createDrainHandlers({
      ...c,
      lambda,
      events,
      cloudformation,
      aws,
      loadConfig: async () => config,
      providers,
      sources: { eventSourceMappings: [triggers.mapping], schedules: triggers.schedules },
      settings: { quietMs: 180_000, deadlineMs: 1_680_000 },
      now,
      sink: lines.sink,
    });

    // The stack the drain belongs to, in moto. moto finishes every stack operation at once, so
    // it answers CREATE_COMPLETE: no Delete is expected then, and the drain refuses, touching nothing.
    const created = await cloudformation.send(new CreateStackCommand({ StackName: 'runners', TemplateBody: JSON.stringify({ Resources: { Marker: { Type: 'AWS::CloudFormation::WaitConditionHandle' } } }) }));
    const deleteEvent = deleteEventOf(created.StackId!);
    await expect(drain.onEvent(deleteEvent)).rejects.toThrow(/the drain did not run: the stack is CREATE_COMPLETE/);
    expect((await lambda.send(new GetEventSourceMappingCommand({ UUID: triggers.mapping }))).State).toBe('Enabled');
    expect((await fleetInstances()).filter((i) => i.State?.Name !== 'terminated')).toHaveLength(6);
    // moto never reports DELETE_IN_PROGRESS (its DeleteStack completes at once): from here this
    // client answers the stack as CloudFormation does while it deletes it.
    const stack = (await cloudformation.send(new DescribeStacksCommand({ StackName: created.StackId! }))).Stacks![0]!;
    const deleting = mockClient(cloudformation);
    deleting.on(DescribeStacksCommand, { StackName: created.StackId! }).resolves({ Stacks: [{ ...stack, StackStatus: StackStatus.DELETE_IN_PROGRESS }] });

    // 1. Stop scaling: the mapping and both schedules are disabled in moto.
    const request = { ...deleteEvent, ...(await drain.onEvent(deleteEvent)) } as IsCompleteEvent;
    expect((await lambda.send(new GetEventSourceMappingCommand({ UUID: triggers.mapping }))).State).toBe('Disabled');
    for (const name of triggers.schedules) expect((await events.send(new DescribeRuleCommand({ Name: name }))).State).toBe('DISABLED');

    // A delivery arriving during the drain: queued, never delivered, nothing launched or registered.
    const before = (await fleetInstances()).length;
    const lateJob = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    await send(githubJob(lateJob.id, lateJob.labels));
    expect(await poll()).toBe(0);
    expect((await fleetInstances()).length).toBe(before);

    // 2 and 3. Poll until complete, each poll a quiet period apart (no waiting on real time).
    const answers: boolean[] = [];
    for (let n = 0; n < 6 && !answers.at(-1); n++) {
      answers.push((await drain.isComplete(request)).IsComplete);
      clock += 180_000;
    }
    expect(answers.at(-1)).toBe(true);
    expect(answers.length).toBeGreaterThan(1);

    // Zero fleet resources left, as moto and the CI services list them.
    const left = (await fleetInstances()).filter((i) => i.State?.Name !== 'terminated');
    expect(left).toEqual([]);
    // Nothing of the parked caches either: every volume went with its instance.
    expect(await volumesOf((await fleetInstances()).map((i) => i.InstanceId!))).toEqual([]);
    // By filter: VolumeIds of deleted volumes is an error (InvalidVolume.NotFound), on EC2 as in moto.
    expect((await c.ec2.send(new DescribeVolumesCommand({ Filters: [{ Name: 'volume-id', Values: volumes }] }))).Volumes ?? []).toEqual([]);
    expect(await parametersUnder(paths.runnerConfigRoot)).toEqual([]);
    expect(await parametersUnder(paths.poolStateRoot)).toEqual([]);
    expect(gh.runners()).toEqual([]);
    expect(gl.runners()).toEqual([]);
    // The operator's secrets are the operator's: kept.
    expect((await parametersUnder(paths.ciRoot)).sort()).toEqual([config.parameters.github.appPrivateKey, config.parameters.gitlab.token].sort());
    // The late job is still queued (its message is left for CloudFormation to delete with the queue).
    const queued = await c.sqs.send(new GetQueueAttributesCommand({ QueueUrl: triggers.queueUrl, AttributeNames: ['ApproximateNumberOfMessages'] }));
    expect(queued.Attributes?.ApproximateNumberOfMessages).toBe('1');
    expect(gh.jobs().find((j) => j.id === lateJob.id)?.status).toBe('queued');
    deleting.restore();
  });
});
