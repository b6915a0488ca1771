import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DescribeInstancesCommand } from '@aws-sdk/client-ec2';
import { CreateQueueCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { PutParameterCommand } from '@aws-sdk/client-ssm';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GitLabProvider } from '../../lambdas/ci';
import { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { DynamoJobRecords } from '../../lambdas/scale-up/job-record';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { GitLabRunnerType, GitLabWebhookOwner, LAMBDA_ENV, Provider, type FleetConfig } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { createWebhookHandler } from '../../lambdas/webhook/handler';
import { startLoopbackGitLab, type GitLabJob, type LoopbackGitLab } from '../../local/ci/gitlab-server';
import { functionUrlEvent, gitlabJobPending } from '../../local/deliveries';
import { INSTANCE_ARN_PREFIX, KEYS, Lines, PREFIX } from '../support/fixtures';
import { startMoto, type MotoServer } from '../support/moto';
import { createJobRecordTable, drainQueue, motoClients, motoDynamo, motoFleet, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

/**
 * The GitLab reconciler end to end: the loopback GitLab (the webhook's event log and resends,
 * pending jobs per project, RateLimit-* headers in GitLab's wire format), the real webhook,
 * queue, scale-up with its per-job record, all on moto.
 */
const GROUP = 42;
const WEBHOOK_TOKEN = 'gitlab-webhook-token-for-reconcile';
let moto: MotoServer;
let c: MotoClients;
let dynamo: DynamoDBClient;
let gl: LoopbackGitLab;
let config: FleetConfig;
let queueUrl: string;
let lines: Lines;

beforeAll(async () => {
  moto = await startMoto();
  c = motoClients(moto.endpoint);
  dynamo = motoDynamo(moto.endpoint);
});
afterAll(async () => moto?.stop());
afterEach(async () => gl?.close());

async function setUp(): Promise<void> {
  await moto.reset();
  lines = new Lines();
  gl = await startLoopbackGitLab({ groupId: GROUP, resend: ({ idempotencyKey, job, projectPath }) => deliver(job, projectPath, idempotencyKey) });
  const { github: _github, ...base } = await motoFleet(c, { labels: ['linux'] });
  config = { ...base, pools: base.pools.map((p) => ({ ...p, provider: Provider.GITLAB })), gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: GROUP, webhook: { owner: GitLabWebhookOwner.GROUP, ownerId: GROUP, hookId: 1 } } };
  queueUrl = (await c.sqs.send(new CreateQueueCommand({ QueueName: 'jobs.fifo', Attributes: { FifoQueue: 'true' } }))).QueueUrl!;
  await c.ssm.send(new PutParameterCommand({ Name: config.parameters.gitlab.webhookToken, Type: 'SecureString', Value: WEBHOOK_TOKEN }));
  await c.ssm.send(new PutParameterCommand({ Name: config.parameters.gitlab.token, Type: 'SecureString', Value: gl.accessToken }));
  await createJobRecordTable(dynamo, 'records');
}

/** A Job Hook "pending" of the job, with the delivery's Idempotency-Key, posted to the webhook. */
async function deliver(job: GitLabJob, projectPath: string, idempotencyKey?: string): Promise<number> {
  const delivery = gitlabJobPending({ buildId: job.id, projectId: job.projectId, projectPath }, WEBHOOK_TOKEN, idempotencyKey);
  const answer = (await webhook()(functionUrlEvent(delivery))) as { statusCode: number };
  return answer.statusCode;
}

const aws = () => new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
const provider = () => new GitLabProvider({ prefix: PREFIX, gitlab: config.gitlab!, pools: config.pools, token: async () => gl.accessToken, sleep: async () => {} });

function webhook() {
  return createWebhookHandler({
    ssm: c.ssm,
    sqs: c.sqs,
    env: { [LAMBDA_ENV.fleetConfig]: JSON.stringify(config), [LAMBDA_ENV.jobsQueueUrl]: queueUrl },
    logger: createLogger({ fn: 'webhook' }, lines.sink),
    metricSink: lines.sink,
  });
}

function reconciler() {
  const gitlab = provider();
  return createReconcileHandler({ sqs: c.sqs, aws: aws(), loadConfig: async () => config, providers: () => ({ gitlab }), queueUrl, sink: lines.sink, options: { gitlab: { minQueuedSeconds: 0 } } });
}

function scaleUp() {
  const gitlab = provider();
  return createScaleUpHandler({
    ...c,
    aws: aws(),
    loadConfig: async () => config,
    providers: () => ({ gitlab }),
    queueUrl,
    deadLetterQueueUrl: 'unused',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    jobRecords: new DynamoJobRecords(aws(), dynamo, 'records'),
    sink: lines.sink,
  });
}

async function drain(run: (event: SQSEvent) => Promise<SQSBatchResponse>): Promise<void> {
  await drainQueue(c.sqs, queueUrl, run, 20);
  const left = await c.sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 1 }));
  expect(left.Messages ?? []).toEqual([]);
}

/** Job id tag → trace id tags of the instances serving it. */
async function served(): Promise<Map<string, string[]>> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.jobId] }, { Name: 'instance-state-name', Values: ['pending', 'running'] }] }));
  const byJob = new Map<string, string[]>();
  for (const i of (out.Reservations ?? []).flatMap((r) => r.Instances ?? [])) {
    const tag = (k: string) => i.Tags?.find((t) => t.Key === k)?.Value ?? '';
    (byJob.get(tag(KEYS.jobId)) ?? byJob.set(tag(KEYS.jobId), []).get(tag(KEYS.jobId))!).push(tag(KEYS.traceId));
  }
  return byJob;
}

describe('GitLab reconciler against the loopback GitLab and moto', () => {
  it('a delivered job, a failed hook event and a never-sent job are each served exactly once', { timeout: scaled(120_000) }, async () => {
    await setUp();
    const path = `group-${GROUP}/project-11`;
    const delivered = gl.addJob(11, ['linux']);
    const failed = gl.addJob(11, ['linux']);
    const neverSent = gl.addJob(12, ['linux']);
    gl.addJob(12, ['windows']); // no pool of ours
    // GitLab logs the delivered event with the webhook's answer; the failed one got a 502.
    const key = gl.recordHookEvent(delivered.id, 202);
    expect(await deliver(delivered, path, key)).toBe(202);
    gl.recordHookEvent(failed.id, 502);
    await drain(scaleUp());
    expect([...(await served()).keys()]).toEqual([`gitlab:${delivered.id}`]);

    const report = await reconciler()();
    expect(report).toMatchObject({ redelivered: 1, queued: 3 });
    expect(gl.hookEvents()[0]).toMatchObject({ response_status: '202' });
    await drain(scaleUp());

    const byJob = await served();
    expect(new Map([...byJob].map(([job, traces]) => [job, traces.length]))).toEqual(
      new Map([
        [`gitlab:${delivered.id}`, 1],
        [`gitlab:${failed.id}`, 1],
        [`gitlab:${neverSent.id}`, 1],
      ]),
    );
    // The never-sent job's trace id says the reconciler found it; the delivered one kept the webhook's.
    expect(byJob.get(`gitlab:${neverSent.id}`)).toEqual([`reconciler-gitlab-${neverSent.id}`]);
    expect(byJob.get(`gitlab:${delivered.id}`)).toEqual([key]);
    expect(gl.runners()).toHaveLength(3);
    expect(lines.metric('Redeliveries')).toBe(1);
    expect(lines.metric('JobsReconciled', { Pool: 'linux' })).toBe(3);

    // A second run: nothing is resent again, and nothing more launches.
    const again = await reconciler()();
    expect(again.redelivered).toBe(0);
    await drain(scaleUp());
    expect([...(await served()).values()].map((t) => t.length)).toEqual([1, 1, 1]);
    expect(gl.runners()).toHaveLength(3);
  });
});
