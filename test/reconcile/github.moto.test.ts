import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DescribeInstancesCommand } from '@aws-sdk/client-ec2';
import { CreateQueueCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { PutParameterCommand } from '@aws-sdk/client-ssm';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { GitHubProvider } from '../../lambdas/ci';
import { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { DynamoJobRecords } from '../../lambdas/scale-up/job-record';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { LAMBDA_ENV, type FleetConfig } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { createWebhookHandler } from '../../lambdas/webhook/handler';
import { startLoopbackGitHub, type GitHubJob, type LoopbackGitHub } from '../../local/ci/github-server';
import { functionUrlEvent, githubWorkflowJobQueued } from '../../local/deliveries';
import { INSTANCE_ARN_PREFIX, KEYS, Lines, PREFIX } from '../support/fixtures';
import { startMoto, type MotoServer } from '../support/moto';
import { createJobRecordTable, drainQueue, motoClients, motoDynamo, motoFleet, type MotoClients } from '../support/moto-fleet';
import { scaled } from '../support/slowdown';

/**
 * The reconciler end to end: the loopback GitHub (deliveries, redeliveries, queued runs and
 * jobs, rate-limit headers in GitHub's wire format), the real webhook, queue, scale-up with
 * its per-job record, all on moto.
 */
const ORG = 'acme';
const SECRET = 'webhook-secret-for-reconcile';
const LABELS = ['self-hosted', 'linux'];
let moto: MotoServer;
let c: MotoClients;
let dynamo: DynamoDBClient;
let gh: LoopbackGitHub;
let config: FleetConfig;
let queueUrl: string;
let lines: Lines;

beforeAll(async () => {
  moto = await startMoto();
  c = motoClients(moto.endpoint);
  dynamo = motoDynamo(moto.endpoint);
});
afterAll(async () => moto?.stop());
afterEach(async () => gh?.close());

async function setUp(options: Parameters<typeof startLoopbackGitHub>[0] = { organization: ORG }): Promise<void> {
  await moto.reset();
  lines = new Lines();
  gh = await startLoopbackGitHub({ ...options, redeliver: ({ guid, job }) => deliver(job, guid) });
  const base = await motoFleet(c, { labels: ['linux'] });
  // moto's instances never boot, so no runner ever proves the launch template: with the
  // default limit the cold gate would hold all but `primeFailureLimit` of a run's jobs (that
  // is the back-off's own test, test/integration/cold-backoff.moto.test.ts; here every job
  // found must launch).
  const pools = base.pools.map((p) => ({ ...p, warm: { ...p.warm, primeFailureLimit: 100 } }));
  config = { ...base, pools, github: { ...base.github!, appId: gh.appId, organization: ORG, apiUrl: gh.url } };
  queueUrl = (await c.sqs.send(new CreateQueueCommand({ QueueName: 'jobs.fifo', Attributes: { FifoQueue: 'true' } }))).QueueUrl!;
  await c.ssm.send(new PutParameterCommand({ Name: config.parameters.github.webhookSecret, Type: 'SecureString', Value: SECRET }));
  await createJobRecordTable(dynamo, 'records');
}

/** GitHub's redelivery: the job's queued delivery with its original GUID, posted to the webhook. */
async function deliver(job: GitHubJob, guid: string): Promise<number> {
  const delivery = githubWorkflowJobQueued({ jobId: job.id, runId: job.runId, repository: job.repository, labels: job.labels }, SECRET, guid);
  const answer = (await webhook()(functionUrlEvent(delivery))) as { statusCode: number };
  return answer.statusCode;
}

const aws = () => new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
const provider = () => new GitHubProvider({ prefix: PREFIX, github: config.github!, pools: config.pools, privateKey: async () => gh.privateKeyPem, sleep: async () => {} });

function webhook() {
  return createWebhookHandler({
    ssm: c.ssm,
    sqs: c.sqs,
    env: { [LAMBDA_ENV.fleetConfig]: JSON.stringify(config), [LAMBDA_ENV.jobsQueueUrl]: queueUrl },
    logger: createLogger({ fn: 'webhook' }, lines.sink),
    metricSink: lines.sink,
  });
}

function reconciler(options: Parameters<typeof createReconcileHandler>[0]['options'] = {}, now?: () => Date) {
  const github = provider();
  return createReconcileHandler({
    sqs: c.sqs,
    aws: aws(),
    loadConfig: async () => config,
    providers: () => ({ github }),
    queueUrl,
    sink: lines.sink,
    ...(now ? { now } : {}),
    options: { ...options, github: { minQueuedSeconds: 0, ...options.github } },
  });
}

function scaleUp() {
  const github = provider();
  return createScaleUpHandler({
    ...c,
    aws: aws(),
    loadConfig: async () => config,
    providers: () => ({ github }),
    queueUrl,
    deadLetterQueueUrl: 'unused',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    jobRecords: new DynamoJobRecords(aws(), dynamo, 'records'),
    sink: lines.sink,
  });
}

/** Feeds the jobs queue to scale-up until it is empty. */
async function drain(run: (event: SQSEvent) => Promise<SQSBatchResponse>): Promise<void> {
  await drainQueue(c.sqs, queueUrl, run, 20);
  const left = await c.sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 1 }));
  expect(left.Messages ?? []).toEqual([]);
}

/** Job id tag → trace id tag of every instance serving a job. */
async function served(): Promise<Map<string, string[]>> {
  const out = await c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.jobId] }, { Name: 'instance-state-name', Values: ['pending', 'running'] }] }));
  const byJob = new Map<string, string[]>();
  for (const i of (out.Reservations ?? []).flatMap((r) => r.Instances ?? [])) {
    const tag = (k: string) => i.Tags?.find((t) => t.Key === k)?.Value ?? '';
    (byJob.get(tag(KEYS.jobId)) ?? byJob.set(tag(KEYS.jobId), []).get(tag(KEYS.jobId))!).push(tag(KEYS.traceId));
  }
  return byJob;
}

/** GitHub requests the reconciler made, token minting and the installation lookup aside. */
const reconcilerRequests = (from: number) => gh.requests().slice(from).filter((r) => !/\/access_tokens$|\/installation$/.test(r.path));

describe('reconciler against the loopback GitHub and moto', () => {
  beforeEach(async () => setUp());

  it('a lost delivery is found and a failed one redelivered, each job served exactly once; copies of a job being served launch nothing', { timeout: scaled(120_000) }, async () => {
    const delivered = gh.addJob(`${ORG}/app`, LABELS);
    const failed = gh.addJob(`${ORG}/app`, LABELS);
    const lost = gh.addJob(`${ORG}/web`, LABELS);
    gh.addJob(`${ORG}/web`, ['ubuntu-latest']); // GitHub's own runners: not ours
    const ok = githubWorkflowJobQueued({ jobId: delivered.id, runId: delivered.runId, repository: delivered.repository, labels: LABELS }, SECRET);
    expect(((await webhook()(functionUrlEvent(ok))) as { statusCode: number }).statusCode).toBe(202);
    gh.recordDelivery(delivered.id, 202);
    gh.recordDelivery(failed.id, 503);
    await drain(scaleUp());
    // The delivered job's runner is registered and its instance booting: the job is still queued at GitHub.
    expect([...(await served()).keys()]).toEqual([`github:${delivered.id}`]);

    const report = await reconciler()();
    await gh.redeliveriesSettled();
    expect(report).toMatchObject({ redelivered: 1, queued: 3 });
    const redeliveries = gh.deliveries().filter((d) => d.redelivery);
    expect(redeliveries).toHaveLength(1);
    expect(redeliveries[0]).toMatchObject({ status_code: 202, status: 'OK' });
    await drain(scaleUp());

    const byJob = await served();
    expect(new Map([...byJob].map(([job, traces]) => [job, traces.length]))).toEqual(
      new Map([
        [`github:${delivered.id}`, 1],
        [`github:${failed.id}`, 1],
        [`github:${lost.id}`, 1],
      ]),
    );
    // The lost job's trace id says the reconciler found it; the delivered one kept the webhook's.
    expect(byJob.get(`github:${lost.id}`)).toEqual([`reconciler-github-${lost.id}`]);
    expect(byJob.get(`github:${delivered.id}`)).toEqual([ok.deliveryId]);
    expect(gh.runners()).toHaveLength(3);
    // The delivered job's reconciled copy, and the failed job's second path (redelivery and scan),
    // each stopped before a registration: by the per-job record, by the instance already
    // serving the job, or as the same job twice in one batch.
    const stopped = ['another delivery of this job holds its record; this copy launches nothing', 'job already has an instance', 'job appears twice in the batch; the other message serves it'];
    expect(stopped.flatMap((m) => lines.logs(m))).toHaveLength(2);
    expect(lines.metric('Redeliveries')).toBe(1);
    expect(lines.metric('JobsReconciled', { Pool: 'linux' })).toBe(3);

    // A second run: nothing is redelivered again, and nothing more launches.
    const again = await reconciler()();
    await gh.redeliveriesSettled();
    expect(again.redelivered).toBe(0);
    await drain(scaleUp());
    expect([...(await served()).values()].map((t) => t.length)).toEqual([1, 1, 1]);
    expect(gh.runners()).toHaveLength(3);
  });

  it('reads repositoriesPerRun repositories a run; consecutive runs reach every repository within ceil(N/cap) runs', async () => {
    await gh.close();
    const repositories = Array.from({ length: 5 }, (_, i) => `${ORG}/repo-${i}`);
    await setUp({ organization: ORG, repositories });
    const jobs = repositories.map((r) => gh.addJob(r, LABELS));
    const cap = 2;
    // Scheduled runs 5 minutes apart, from a run number that is not a multiple of anything in play.
    const first = Math.floor(Date.now() / 300_000) + 7;
    const queued: number[] = [];
    const runsRead: string[] = [];
    for (let k = 0; k < Math.ceil(repositories.length / cap); k++) {
      const from = gh.requests().length;
      const report = await reconciler({ github: { repositoriesPerRun: cap, intervalSeconds: 300 } }, () => new Date((first + k) * 300_000))();
      const lists = reconcilerRequests(from).filter((r) => r.path.endsWith('/actions/runs'));
      expect(lists).toHaveLength(2 * cap); // queued and in_progress, per repository of the window
      runsRead.push(...lists.map((r) => r.path));
      queued.push(report.queued);
    }
    expect(new Set(runsRead).size).toBe(repositories.length);
    await drain(scaleUp());
    expect([...(await served()).keys()].sort()).toEqual(jobs.map((j) => `github:${j.id}`).sort());
    expect(queued.reduce((a, b) => a + b)).toBeGreaterThanOrEqual(repositories.length);
  });

  it('its requests stay within the stated budget: D + R + floor(N/100) + 1 + 2 min(N, cap) + min(runs, runReadLimit)', async () => {
    await gh.close();
    const repositories = Array.from({ length: 6 }, (_, i) => `${ORG}/repo-${i}`);
    await setUp({ organization: ORG, repositories });
    for (const r of repositories.slice(0, 4)) gh.addJob(r, LABELS);
    const run = gh.addJob(repositories[4]!, LABELS).runId;
    gh.addJob(repositories[4]!, LABELS, run);
    const failedJob = gh.addJob(repositories[5]!, LABELS);
    gh.recordDelivery(failedJob.id, 500);
    const n = repositories.length;
    const runs = 6;

    const from = gh.requests().length;
    const report = await reconciler()();
    await gh.redeliveriesSettled();
    const made = reconcilerRequests(from);
    // D = 1 page of deliveries, R = 1 redelivery, 1 page of repositories, 2 run lists per repository, 1 job list per run.
    const budget = 1 + 1 + Math.floor(n / 100) + 1 + 2 * Math.min(n, 50) + Math.min(runs, 100);
    expect(made.length).toBe(report.requests);
    expect(made.length).toBeLessThanOrEqual(budget);
    expect(made.filter((r) => r.path.endsWith('/jobs'))).toHaveLength(runs);
    expect(report.queued).toBe(7);

    // runReadLimit caps the job lists; the rest waits for the next run.
    const capped = gh.requests().length;
    const limited = await reconciler({ github: { runReadLimit: 2 } })();
    expect(reconcilerRequests(capped).filter((r) => r.path.endsWith('/jobs'))).toHaveLength(2);
    expect(limited.requests).toBeLessThanOrEqual(1 + 0 + 1 + 2 * n + 2);

    // repositoriesPerRun caps the run lists: 2 per repository of the window.
    const windowed = gh.requests().length;
    const capped3 = await reconciler({ github: { repositoriesPerRun: 3 } })();
    expect(reconcilerRequests(windowed).filter((r) => r.path.endsWith('/actions/runs'))).toHaveLength(2 * 3);
    expect(capped3.requests).toBeLessThanOrEqual(1 + 0 + 1 + 2 * 3 + Math.min(runs, 100));
  });

  it('reads x-ratelimit-* and stops before the reserve, publishing what is left', async () => {
    await gh.close();
    const repositories = Array.from({ length: 10 }, (_, i) => `${ORG}/repo-${i}`);
    await setUp({ organization: ORG, repositories, rateLimit: 1000 });
    for (const r of repositories) gh.addJob(r, LABELS);
    // Reserve: 20% of 1000. Five requests are left above it.
    gh.setRateLimitRemaining('installation', 205);
    const from = gh.requests().length;
    const report = await reconciler()();
    expect(report.stoppedAt).toBe('installation');
    const made = reconcilerRequests(from).filter((r) => r.credential === 'installation');
    expect(made).toHaveLength(5);
    const remaining = (credential: string) => lines.json().find((l) => l._aws && l.Credential === credential)?.CiRateLimitRemaining;
    expect(remaining('github-installation')).toEqual([200]);
    expect(remaining('github-app')).toEqual([expect.any(Number)]);
    expect(lines.logs('reconciler stopped at the rate limit reserve; the next run goes on')).toHaveLength(1);
  });
});
