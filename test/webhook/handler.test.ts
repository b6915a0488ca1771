import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CreateQueueCommand, DeleteMessageCommand, PurgeQueueCommand, ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import { DeleteParameterCommand, PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import examples from '@octokit/webhooks-examples';
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildFleetConfig, JOB_MESSAGE_MAX_BYTES, LEDGER_MESSAGE, runnerName, LAMBDA_ENV, METRIC_NAMES, parseJobMessage, ssmPaths, GitLabRunnerType, LabelMatch, Provider, type JobMessage } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { createWebhookHandler, type WebhookOptions } from '../../lambdas/webhook/handler';
import { captureConsole } from '../support/console-capture';
import { startLoopback, type Loopback, type Route } from '../support/loopback';
import { startMoto, type MotoServer } from '../support/moto';
import { scaled, slowdown } from '../support/slowdown';
import { functionUrlEvent, githubHeaders, plantSecret, restApiEvent, secretForms, standardWebhookHeaders } from './support';

const PREFIX = 'wh-test';
const paths = ssmPaths(PREFIX);
const secrets = {
  githubWebhook: plantSecret('gh-webhook'),
  gitlabWebhookToken: plantSecret('gl-webhook'),
  gitlabSigningKey: `whsec_${Buffer.from(plantSecret('gl-signing')).toString('base64')}`,
  gitlabApiToken: `glpat-${plantSecret('gl-api')}`,
};
const NOW = new Date('2026-11-29T19:00:00.000Z');
const jobHook = JSON.parse(readFileSync(join(__dirname, 'fixtures', 'gitlab-job-hook.json'), 'utf8')) as Record<string, unknown>;
const workflowJob = examples.find((e) => e.name === 'workflow_job')!;
type Example = { action: string; workflow_job: { labels: string[] } };
/** The community example of a queued job asking for [self-hosted, k8s]. */
const queuedSelfHosted = JSON.stringify((workflowJob.examples as unknown as Example[]).find((e) => e.action === 'queued' && e.workflow_job.labels.includes('k8s')));

let moto: MotoServer;
let gitlab: Loopback;
let gitlabRoute: Route;
let ssm: SSMClient;
let sqs: SQSClient;
let queueUrl: string;
let deadLetterQueueUrl: string;
let ssmReads = 0;
/** Added to every SSM GetParameter call, to play a cold container's slow SSM. */
let ssmDelayMs = 0;
const logLines: string[] = [];
const metricLines: string[] = [];

function config(gitlabUrl: string, gitlabScope: { runnerType?: GitLabRunnerType; scopeId?: number } = {}) {
  return buildFleetConfig({
    prefix: PREFIX,
    github: { appId: '4242', repositories: ['lineville/elastic-machines-testing', 'Codertocat/Hello-World'] },
    gitlab: { url: gitlabUrl, ...gitlabScope },
    pools: [
      { name: 'gh-k8s', provider: Provider.GITHUB, labels: ['k8s'], launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] },
      { name: 'gl-docker', provider: Provider.GITLAB, labels: ['docker'], launchTemplateId: 'lt-2', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] },
      // Default exact rule, and run_untagged: takes untagged jobs and jobs tagged [linux, x64].
      { name: 'gl-general', provider: Provider.GITLAB, labels: ['linux', 'x64'], runUntagged: true, launchTemplateId: 'lt-3', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] },
    ],
  });
}

function newHandler(options: WebhookOptions = {}, env: Record<string, string> = {}, now: () => Date = () => NOW) {
  return createWebhookHandler({
    ssm,
    sqs,
    now,
    logger: createLogger({ fn: 'webhook' }, (l) => logLines.push(l)),
    metricSink: (l) => metricLines.push(l),
    env: { [LAMBDA_ENV.fleetConfig]: JSON.stringify(config(gitlab.url)), [LAMBDA_ENV.jobsQueueUrl]: queueUrl, [LAMBDA_ENV.deadLetterQueueUrl]: deadLetterQueueUrl, ...env },
    options: { tagLookupTimeoutMs: scaled(1_000), ...options },
  });
}

async function queued(url = queueUrl): Promise<Message[]> {
  const out: Message[] = [];
  for (;;) {
    const res = await sqs.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, VisibilityTimeout: 60, MessageSystemAttributeNames: ['All'], MessageAttributeNames: ['All'] }));
    if (!res.Messages?.length) return out;
    out.push(...res.Messages);
  }
}

const parsed = (m: Message): JobMessage => parseJobMessage(m.Body!);
/** The error of the handler's "tag lookup failed" line among these, as written (the logger writes spaces as "?"). */
const lookupFailure = (lines: readonly string[]): string | undefined => {
  const line = lines.find((l) => l.includes('GitLab tag lookup failed'));
  return line === undefined ? undefined : String((JSON.parse(line) as { error?: unknown }).error).replace(/\?/g, ' ');
};
const result = (r: unknown) => r as APIGatewayProxyStructuredResultV2;
const outcome = (r: unknown) => JSON.parse(result(r).body!) as { outcome: string; reason: string };

function gitlabEvent(status: string, headers: Record<string, string> = {}, extra: Record<string, unknown> = {}) {
  const payload = { ...jobHook, build_status: status, ...(status === 'pending' || status === 'created' ? { runner: null } : {}), ...extra };
  const body = JSON.stringify(payload);
  return {
    body,
    event: functionUrlEvent(
      '/gitlab',
      { 'Content-Type': 'application/json', 'User-Agent': 'GitLab/18.6.0', 'X-Gitlab-Event': 'Job Hook', 'X-Gitlab-Token': secrets.gitlabWebhookToken, 'Idempotency-Key': randomUUID(), ...headers },
      body,
    ),
  };
}

let consoleLines: string[] = [];
beforeAll(async () => {
  consoleLines = captureConsole();
  moto = await startMoto();
  gitlab = await startLoopback((req) => gitlabRoute(req));
  const clientConfig = { endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' } };
  ssm = new SSMClient(clientConfig);
  ssm.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'GetParameterCommand') {
        ssmReads++;
        if (ssmDelayMs > 0) await new Promise((resolve) => setTimeout(resolve, ssmDelayMs));
      }
      return next(args);
    },
    { step: 'initialize' },
  );
  sqs = new SQSClient(clientConfig);
  queueUrl = (await sqs.send(new CreateQueueCommand({ QueueName: 'jobs.fifo', Attributes: { FifoQueue: 'true', ContentBasedDeduplication: 'false' } }))).QueueUrl!;
  deadLetterQueueUrl = (await sqs.send(new CreateQueueCommand({ QueueName: 'jobs-dlq.fifo', Attributes: { FifoQueue: 'true', ContentBasedDeduplication: 'false' } }))).QueueUrl!;
  const put = (Name: string, Value: string) => ssm.send(new PutParameterCommand({ Name, Value, Type: 'SecureString', Overwrite: true }));
  await put(paths.github.webhookSecret, secrets.githubWebhook);
  await put(paths.gitlab.webhookToken, secrets.gitlabWebhookToken);
  await put(paths.gitlab.token, secrets.gitlabApiToken);
});

afterAll(async () => {
  await gitlab?.close();
  await moto?.stop();
});

beforeEach(async () => {
  ssmDelayMs = 0;
  await sqs.send(new PurgeQueueCommand({ QueueUrl: queueUrl }));
  await sqs.send(new PurgeQueueCommand({ QueueUrl: deadLetterQueueUrl }));
  gitlab.requests.length = 0;
  gitlabRoute = (req) => (req.path === '/api/v4/projects/380/jobs/1977' ? { status: 200, body: { id: 1977, status: 'pending', tag_list: ['docker'] } } : { status: 404, body: { message: '404 Not found' } });
});

/** The ledger lines (contract ledger.ts) among these log lines, in the order written. */
const ledgerLines = (lines: readonly string[]) =>
  lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.message === LEDGER_MESSAGE).map(({ traceId, jobId, pool, stage, at, seconds }) => ({ traceId, jobId, pool, stage, at, seconds }));

describe('API Gateway exposure (REST API proxy events, payload format 1.0)', () => {
  it('queues a signed delivery, refuses another method, and routes by the resource path without the stage', async () => {
    const handler = newHandler();
    const before = (await queued()).length;
    const body = queuedSelfHosted;
    // GitHub's header spelling, not lower-cased: API Gateway passes them as sent.
    const headers = githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID());
    expect(outcome(await handler(restApiEvent('/github', headers, body))).outcome).toBe('queued');
    expect((await queued()).length).toBe(before + 1);
    const get = await handler(restApiEvent('/github', headers, body, { method: 'GET' }));
    expect(get).toMatchObject({ statusCode: 405 });
    expect(await handler(restApiEvent('/webhook/github', headers, body))).toMatchObject({ statusCode: 404 });
  });

  it("routes by the API's resource, not the request path: behind a custom domain with a base path mapping", async () => {
    const handler = newHandler();
    const before = (await queued()).length;
    const headers = githubHeaders(queuedSelfHosted, secrets.githubWebhook, 'workflow_job', randomUUID());
    expect(outcome(await handler(restApiEvent('/github', headers, queuedSelfHosted, { basePath: 'ci-runners' }))).outcome).toBe('queued');
    expect((await queued()).length).toBe(before + 1);
  });
});

describe('latency ledger', () => {
  const ours = runnerName(PREFIX, 'i-0123456789abcdef0', NOW);

  it('stamps received (from the job\'s creation) then queued (from receipt) for a queued job: trace id, job id, pool, time, seconds, and an EMF sample each', async () => {
    // The clock moves 250 ms per reading: receipt, then the queued stamp after the send.
    let tick = 0;
    const handler = newHandler({}, {}, () => new Date(NOW.getTime() + 250 * tick++));
    const start = logLines.length;
    const metricStart = metricLines.length;
    const delivery = randomUUID();
    const res = await handler(functionUrlEvent('/github', githubHeaders(queuedSelfHosted, secrets.githubWebhook, 'workflow_job', delivery), queuedSelfHosted));
    expect(outcome(res).outcome).toBe('queued');
    const lines = ledgerLines(logLines.slice(start));
    expect(lines.map((l) => l.stage)).toEqual(['received', 'queued']);
    // received: how long the job waited at GitHub before the fleet knew of it (the example's created_at to receipt).
    const createdAt = Date.parse((JSON.parse(queuedSelfHosted) as { workflow_job: { created_at: string } }).workflow_job.created_at);
    expect(lines[0]).toEqual({ traceId: delivery, jobId: 'github:12877621891', pool: 'gh-k8s', stage: 'received', at: NOW.toISOString(), seconds: (NOW.getTime() - createdAt) / 1000 });
    expect(lines[0]!.seconds).toBeGreaterThan(0);
    expect(lines[1]).toMatchObject({ traceId: delivery, jobId: 'github:12877621891', pool: 'gh-k8s', stage: 'queued' });
    expect(lines[1]!.seconds).toBe((Date.parse(lines[1]!.at as string) - NOW.getTime()) / 1000);
    expect(lines[1]!.seconds).toBeGreaterThan(0);
    const samples = metricLines.slice(metricStart).map((l) => JSON.parse(l) as Record<string, unknown>).filter((r) => METRIC_NAMES.jobStageSeconds in r);
    expect(samples.map((r) => [r.Pool, r.Stage, r[METRIC_NAMES.jobStageSeconds]])).toEqual(lines.map((l) => ['gh-k8s', l.stage, l.seconds]));
  });

  it("stamps job-started from GitHub's in_progress delivery of a job one of our runners took: started_at less created_at", async () => {
    const handler = newHandler();
    const job = JSON.parse(queuedSelfHosted) as { action: string; workflow_job: Record<string, unknown> };
    const inProgress = (runner: string) =>
      JSON.stringify({ ...job, action: 'in_progress', workflow_job: { ...job.workflow_job, status: 'in_progress', created_at: '2026-11-29T18:59:00Z', started_at: '2026-11-29T18:59:07Z', runner_name: runner } });
    const start = logLines.length;
    const ourDelivery = randomUUID();
    for (const [body, delivery] of [[inProgress(ours), ourDelivery], [inProgress('GitHub Actions 12'), randomUUID()]] as const) {
      const res = await handler(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', delivery), body));
      expect([result(res).statusCode, outcome(res).outcome]).toEqual([200, 'ignored']);
    }
    // Only the job our runner took; nothing queued.
    expect(ledgerLines(logLines.slice(start))).toEqual([{ traceId: ourDelivery, jobId: 'github:12877621891', pool: 'gh-k8s', stage: 'job-started', at: '2026-11-29T18:59:07.000Z', seconds: 7 }]);
    expect(await queued()).toEqual([]);
  });

  it('stamps queued without received for a job whose creation time is unknown (no created_at)', async () => {
    const handler = newHandler();
    const example = JSON.parse(queuedSelfHosted) as { workflow_job: Record<string, unknown> };
    const body = JSON.stringify({ ...example, workflow_job: { ...example.workflow_job, created_at: null } });
    const start = logLines.length;
    expect(outcome(await handler(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), body))).outcome).toBe('queued');
    expect(ledgerLines(logLines.slice(start)).map((l) => l.stage)).toEqual(['queued']);
  });

  it('stamps nothing when the queue send fails: queued means the message is in the queue (the sender redelivers)', async () => {
    // A queue that does not exist: moto refuses the send, as SQS would.
    const handler = newHandler({}, { [LAMBDA_ENV.jobsQueueUrl]: queueUrl.replace(/jobs\.fifo$/, 'gone.fifo') });
    const start = logLines.length;
    const metricStart = metricLines.length;
    const res = await handler(functionUrlEvent('/github', githubHeaders(queuedSelfHosted, secrets.githubWebhook, 'workflow_job', randomUUID()), queuedSelfHosted));
    expect([result(res).statusCode, outcome(res).outcome]).toEqual([500, 'error']);
    expect(ledgerLines(logLines.slice(start))).toEqual([]);
    expect(metricLines.slice(metricStart).filter((l) => METRIC_NAMES.jobStageSeconds in (JSON.parse(l) as Record<string, unknown>))).toEqual([]);
  });

  it('writes no ledger line for a badly signed in_progress delivery (GitHub) or running Job Hook (GitLab) of our runner', async () => {
    const handler = newHandler();
    const job = JSON.parse(queuedSelfHosted) as { workflow_job: Record<string, unknown> };
    const body = JSON.stringify({ ...job, action: 'in_progress', workflow_job: { ...job.workflow_job, status: 'in_progress', created_at: '2026-11-29T18:59:00Z', started_at: '2026-11-29T18:59:07Z', runner_name: ours } });
    const runner = { ...(jobHook.runner as Record<string, unknown>), description: ours, tags: ['docker'] };
    const times = { runner, build_created_at_iso: '2026-11-29T18:58:00Z', build_started_at_iso: '2026-11-29T18:58:12Z' };
    const { event: gitlabRunning } = gitlabEvent('running', {}, times);
    const start = logLines.length;
    const forged = await handler(functionUrlEvent('/github', githubHeaders(body, 'not-the-secret', 'workflow_job', randomUUID()), body));
    expect(result(forged).statusCode).toBe(401);
    const wrongToken = await handler(gitlabEvent('running', { 'X-Gitlab-Token': 'not-the-token' }, times).event);
    expect(result(wrongToken).statusCode).toBe(401);
    expect(ledgerLines(logLines.slice(start))).toEqual([]);
    // The same deliveries, signed: each stamps job-started (so the refusal above is the signature's).
    expect(result(await handler(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), body))).statusCode).toBe(200);
    expect(result(await handler(gitlabRunning)).statusCode).toBe(200);
    expect(ledgerLines(logLines.slice(start)).map((l) => [l.jobId, l.stage])).toEqual([
      ['github:12877621891', 'job-started'],
      ['gitlab:1977', 'job-started'],
    ]);
  });

  it("stamps job-started from GitLab's running Job Hook, its pool found by the runner's tags", async () => {
    const handler = newHandler();
    const runner = { ...(jobHook.runner as Record<string, unknown>), description: ours, tags: ['docker'] };
    const start = logLines.length;
    const { event } = gitlabEvent('running', {}, { runner, build_created_at: '2026-11-29 18:58:00 UTC', build_created_at_iso: '2026-11-29T18:58:00Z', build_started_at: '2026-11-29 18:58:12 UTC', build_started_at_iso: '2026-11-29T18:58:12Z' });
    expect(outcome(await handler(event)).outcome).toBe('ignored');
    expect(ledgerLines(logLines.slice(start))).toMatchObject([{ jobId: 'gitlab:1977', pool: 'gl-docker', stage: 'job-started', at: '2026-11-29T18:58:12.000Z', seconds: 12 }]);
  });
});

describe('GitHub deliveries (community example payloads)', () => {
  it('queues exactly the queued self-hosted workflow_job whose labels match a pool, and acknowledges every other action', async () => {
    const handler = newHandler();
    const seen: { action: string; status: number; outcome: string }[] = [];
    for (const example of workflowJob.examples) {
      const body = JSON.stringify(example);
      const res = await handler(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), body));
      seen.push({ action: (example as { action: string }).action, status: result(res).statusCode!, outcome: outcome(res).outcome });
    }
    expect(workflowJob.actions.sort()).toEqual(['completed', 'in_progress', 'queued', 'waiting']);
    // Every action is covered; only the queued [self-hosted, k8s] example is queued.
    expect(new Set(seen.map((s) => s.action))).toEqual(new Set(workflowJob.actions));
    expect(seen.filter((s) => s.outcome === 'queued')).toEqual([{ action: 'queued', status: 202, outcome: 'queued' }]);
    expect(seen.filter((s) => s.outcome !== 'queued').every((s) => s.status === 200 && s.outcome === 'ignored')).toBe(true);

    const messages = await queued();
    expect(messages).toHaveLength(1);
    const m = parsed(messages[0]!);
    expect(m).toMatchObject({
      provider: Provider.GITHUB,
      jobId: 'github:12877621891',
      providerJobId: '12877621891',
      pool: 'gh-k8s',
      owner: 'lineville',
      project: 'elastic-machines-testing',
      labels: ['self-hosted', 'k8s'],
      labelsResolved: true,
      receivedAt: NOW.toISOString(),
    });
    expect(m.traceId).toBe(m.deliveryId);
    expect(messages[0]!.Attributes?.MessageGroupId).toBe('github:12877621891');
    expect(messages[0]!.Attributes?.MessageDeduplicationId).toBe(`github:${m.deliveryId}`);
    const metric = metricLines.map((l) => JSON.parse(l) as Record<string, unknown>).find((r) => r[METRIC_NAMES.jobsReceived] === 1);
    expect(metric).toMatchObject({ Pool: 'gh-k8s' });
  });

  it('queues a queued job whose runs-on names the pool\'s labels without "self-hosted"; a pool with requireSelfHostedLabel ignores it', async () => {
    // The community example with `runs-on: k8s` instead of `[self-hosted, k8s]`.
    const example = JSON.parse(queuedSelfHosted) as { workflow_job: { labels: string[] } };
    example.workflow_job.labels = ['k8s'];
    const body = JSON.stringify(example);
    const event = () => functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), body);
    const res = result(await newHandler()(event()));
    expect([res.statusCode, outcome(res).reason]).toEqual([202, 'queued']);
    const messages = await queued();
    expect(messages.map((m) => parsed(m))).toMatchObject([{ pool: 'gh-k8s', labels: ['k8s'] }]);

    const strict = config(gitlab.url);
    const strictConfig = { ...strict, pools: strict.pools.map((p) => (p.name === 'gh-k8s' ? { ...p, requireSelfHostedLabel: true } : p)) };
    const strictRes = result(await newHandler({}, { [LAMBDA_ENV.fleetConfig]: JSON.stringify(strictConfig) })(event()));
    expect([strictRes.statusCode, outcome(strictRes).reason]).toEqual([200, 'not-self-hosted']);
    expect(await queued()).toHaveLength(0);
  });

  it('acknowledges ping and other event types without queueing', async () => {
    const handler = newHandler();
    for (const name of ['ping', 'push', 'workflow_run', 'check_run', 'issues', 'installation']) {
      const example = examples.find((e) => e.name === name)!.examples[0];
      const body = JSON.stringify(example);
      const res = result(await handler(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, name, randomUUID()), body)));
      expect(res.statusCode, name).toBe(200);
    }
    expect(await queued()).toHaveLength(0);
  });

  it('verifies base64-encoded Function URL bodies over the decoded bytes', async () => {
    const body = queuedSelfHosted;
    const res = result(await newHandler()(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), body, { base64: true })));
    expect(res.statusCode).toBe(202);
    expect(await queued()).toHaveLength(1);
  });
  it.each([
    ['plain', false],
    ['base64-encoded (Function URL isBase64Encoded)', true],
  ])('verifies the HMAC over the raw body bytes as sent, not over re-serialised JSON: %s', async (_name, base64) => {
    const handler = newHandler();
    const base = JSON.parse(queuedSelfHosted) as { workflow_job: Record<string, unknown> } & Record<string, unknown>;
    const withId = (id: number, name = 'build') => ({ ...base, workflow_job: { ...base.workflow_job, id, name } });
    const offset = base64 ? 100 : 0;
    const variants: [string, number, string][] = [
      ['pretty-printed', 9_100 + offset, JSON.stringify(withId(9_100 + offset), null, 2)],
      // JSON.stringify writes "é" as is; GitHub's serialiser may escape it.
      ['a \\u00e9 escape', 9_101 + offset, JSON.stringify(withId(9_101 + offset, 'caf-MARK')).replace('caf-MARK', 'caf\\u00e9')],
      ['raw UTF-8 outside ASCII, one-space indent', 9_102 + offset, JSON.stringify(withId(9_102 + offset, 'café ✓'), null, 1)],
      ['keys in another order', 9_103 + offset, JSON.stringify(Object.fromEntries(Object.entries(withId(9_103 + offset)).reverse()))],
      ['CRLF and spaces', 9_104 + offset, JSON.stringify(withId(9_104 + offset), null, '\t').replace(/\n/g, '\r\n') + '\r\n'],
    ];
    for (const [name, id, body] of variants) {
      // The premise: none of these is the body a parse and stringify (in GitHub's key order) would give.
      expect(JSON.stringify(withId(id, (JSON.parse(body) as { workflow_job: { name: string } }).workflow_job.name)), name).not.toBe(body);
      const res = result(await handler(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), body, { base64 })));
      expect([name, res.statusCode, outcome(res).reason]).toEqual([name, 202, 'queued']);
    }
    const ids = (await queued()).map((m) => parsed(m).providerJobId).sort();
    expect(ids).toEqual(variants.map(([, id]) => String(id)).sort());
  });
});

describe('GitLab deliveries (documented Job Hook, one fixture per status)', () => {
  it.each(['created', 'pending', 'running', 'success', 'failed', 'canceled', 'skipped', 'manual'])('%s', async (status) => {
    const { event } = gitlabEvent(status);
    const res = result(await newHandler()(event));
    const messages = await queued();
    if (status === 'pending') {
      expect(res.statusCode).toBe(202);
      expect(messages).toHaveLength(1);
      expect(parsed(messages[0]!)).toMatchObject({
        provider: Provider.GITLAB,
        jobId: 'gitlab:1977',
        projectId: 380,
        owner: 'gitlab-org',
        project: 'gitlab-test',
        pool: 'gl-docker',
        labels: ['docker'],
        labelsResolved: true,
      });
      // The tag lookup used the API token from SSM, against the documented jobs endpoint.
      expect(gitlab.requests).toHaveLength(1);
      expect(gitlab.requests[0]!.headers['private-token']).toBe(secrets.gitlabApiToken);
    } else {
      expect(res.statusCode).toBe(200);
      expect(messages).toHaveLength(0);
      expect(gitlab.requests).toHaveLength(0);
    }
  });

  it.each([
    [381, 200, 'project-not-served', 0],
    [380, 202, 'queued', 1],
  ])('project runners of project %i: a job of project 380 answers %i %s', async (scopeId, status, reason, count) => {
    const projectRunners = config(gitlab.url, { runnerType: GitLabRunnerType.PROJECT, scopeId });
    const res = result(await newHandler({}, { [LAMBDA_ENV.fleetConfig]: JSON.stringify(projectRunners) })(gitlabEvent('pending').event));
    expect([res.statusCode, outcome(res).reason]).toEqual([status, reason]);
    expect(await queued()).toHaveLength(count);
    // A job the runners cannot serve is not even looked up.
    expect(gitlab.requests).toHaveLength(count);
    if (count === 0) expect(logLines.some((l) => l.includes('"reason":"project-not-served"'))).toBe(true);
  });

  it.each([
    [381, 200, 'no-matching-pool', undefined],
    [380, 202, 'queued', 'gl-docker'],
  ])('a pool of project %i (gitlabProjectId) is a candidate only for its own project: a docker job of project 380 answers %i %s', async (projectId, status, reason, pool) => {
    gitlabRoute = () => ({ status: 200, body: { id: 1977, status: 'pending', tag_list: ['docker'] } });
    const base = config(gitlab.url);
    const scoped = { ...base, pools: base.pools.map((p) => (p.name === 'gl-docker' ? { ...p, gitlabProjectId: projectId } : p)) };
    const res = result(await newHandler({}, { [LAMBDA_ENV.fleetConfig]: JSON.stringify(scoped) })(gitlabEvent('pending').event));
    expect([res.statusCode, outcome(res).reason]).toEqual([status, reason]);
    const messages = await queued();
    expect(messages.map((m) => parsed(m).pool)).toEqual(pool ? [pool] : []);
  });

  const LOOKUP_BOUND_MS = 300;
  const LOOKUP_MARGIN_MS = 700;

  it('queues an untagged pending job for the pool that runs untagged jobs', async () => {
    gitlabRoute = () => ({ status: 200, body: { id: 1977, status: 'pending', tag_list: [] } });
    const res = result(await newHandler()(gitlabEvent('pending').event));
    expect([res.statusCode, outcome(res).reason]).toEqual([202, 'queued']);
    const messages = await queued();
    expect(messages).toHaveLength(1);
    expect(parsed(messages[0]!)).toMatchObject({ jobId: 'gitlab:1977', pool: 'gl-general', labels: [], labelsResolved: true });
  });

  it('acknowledges a pending job whose tags match no pool', async () => {
    gitlabRoute = () => ({ status: 200, body: { id: 1977, status: 'pending', tag_list: ['windows'] } });
    const res = result(await newHandler()(gitlabEvent('pending').event));
    expect([res.statusCode, outcome(res).reason]).toEqual([200, 'no-matching-pool']);
    expect(await queued()).toHaveLength(0);
  });

  // How each lookup ends: cut at its bound (an unbounded lookup would retry for 1.5 s or wait
  // for the client's 10 s), or by GitLab's own final answer, never retried.
  it.each([
    ['500 with retries', (() => ({ status: 500, body: { message: '500 Internal Server Error' } })) as Route, 'bound'],
    ['401', (() => ({ status: 401, body: { message: '401 Unauthorized' } })) as Route, 'answer'],
    ['403', (() => ({ status: 403, body: { message: '403 Forbidden' } })) as Route, 'answer'],
    ['404', (() => ({ status: 404, body: { message: '404 Not found' } })) as Route, 'answer'],
    ['429 asking for a minute', (() => ({ status: 429, headers: { 'retry-after': '60' }, body: { message: 'Retry later' } })) as Route, 'answer'],
    ['a server that never answers', (() => 'hang') as Route, 'bound'],
  ])('queues the job with its tags unresolved when the lookup gets %s, within the lookup bound', async (_name, route, endedBy) => {
    gitlabRoute = route;
    const handler = newHandler({ tagLookupTimeoutMs: LOOKUP_BOUND_MS });
    // Warm the container (fleet config, webhook token) so the time measured is the lookup's and the send's.
    expect(result(await handler(gitlabEvent('running').event)).statusCode).toBe(200);
    gitlab.requests.length = 0;
    const linesBefore = logLines.length;
    const started = performance.now();
    const res = result(await handler(gitlabEvent('pending').event));
    const elapsed = performance.now() - started;
    expect([res.statusCode, outcome(res).reason]).toEqual([202, 'queued-labels-unresolved']);
    const failure = lookupFailure(logLines.slice(linesBefore));
    expect(failure).toBeDefined();
    if (endedBy === 'bound') {
      // The bound ended it, not a retry running out or the client's own timeout.
      expect(failure).toBe(`tag lookup exceeded its ${LOOKUP_BOUND_MS} ms share of the request deadline`);
    } else {
      // A final answer: asked once, not retried.
      expect(gitlab.requests).toHaveLength(1);
    }
    // Only a hang catcher (scaled with the machine): the checks above decide.
    expect(elapsed).toBeLessThan(LOOKUP_BOUND_MS + scaled(LOOKUP_MARGIN_MS));
    const messages = await queued();
    expect(messages).toHaveLength(1);
    const m = parsed(messages[0]!);
    expect(m).toMatchObject({ jobId: 'gitlab:1977', labels: [], labelsResolved: false });
    expect(m.pool).toBeUndefined();
  });

  it('checks the Standard Webhooks signature when a signing key is configured', async () => {
    await ssm.send(new PutParameterCommand({ Name: paths.gitlab.webhookSigningKey, Value: secrets.gitlabSigningKey, Type: 'SecureString', Overwrite: true }));
    try {
      const handler = newHandler();
      const nowS = NOW.getTime() / 1000;
      const signed = (ts: number, id = randomUUID()) => {
        const { body } = gitlabEvent('pending');
        return gitlabEvent('pending', { ...standardWebhookHeaders(body, secrets.gitlabSigningKey, id, ts), 'Idempotency-Key': id }, {}).event;
      };
      // gitlabEvent builds the same body for the same status, so the signature covers it.
      expect(result(await handler(signed(nowS - 10))).statusCode).toBe(202);
      expect(result(await handler(signed(nowS - 301))).statusCode).toBe(401);
      expect(result(await handler(gitlabEvent('pending').event)).statusCode).toBe(401); // no signature headers
      expect(await queued()).toHaveLength(1);

      // The bad-input table for Standard Webhooks: each 401, nothing queued.
      const { body } = gitlabEvent('pending');
      const good = standardWebhookHeaders(body, secrets.gitlabSigningKey, 'msg-1', nowS);
      const otherKey = `whsec_${Buffer.from('another signing key, 32 bytes..').toString('base64')}`;
      const bad: [string, Record<string, string>][] = [
        ['wrong key', standardWebhookHeaders(body, otherKey, 'msg-1', nowS)],
        ['truncated signature', { ...good, 'webhook-signature': good['webhook-signature']!.slice(0, 20) }],
        ['wrong version prefix', { ...good, 'webhook-signature': good['webhook-signature']!.replace('v1,', 'v1a,') }],
        ['signature of another body', standardWebhookHeaders('{}', secrets.gitlabSigningKey, 'msg-1', nowS)],
        ['signature for another id', { ...good, 'webhook-id': 'msg-2' }],
        ['timestamp too old', standardWebhookHeaders(body, secrets.gitlabSigningKey, 'msg-1', nowS - 600)],
        ['timestamp in the future', standardWebhookHeaders(body, secrets.gitlabSigningKey, 'msg-1', nowS + 600)],
        ['right signature, wrong X-Gitlab-Token', { ...good, 'X-Gitlab-Token': 'nope' }],
      ];
      for (const [name, headers] of bad) {
        const res = result(await handler(gitlabEvent('pending', headers).event));
        expect([name, res.statusCode]).toEqual([name, 401]);
      }
      expect(await queued()).toHaveLength(0);
    } finally {
      await ssm.send(new DeleteParameterCommand({ Name: paths.gitlab.webhookSigningKey }));
    }
  });
});

describe('bad input: a precise status and nothing queued', () => {
  const ghBody = queuedSelfHosted;
  const gh = (body: string | Buffer, headers: Record<string, string>, opts: { base64?: boolean; method?: string } = {}) => functionUrlEvent('/github', headers, body, opts);
  const ghh = (body: string | Buffer, override: Record<string, string> = {}) => ({ ...githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), ...override });
  const big = Buffer.alloc(2 * 1024 * 1024, 'a');
  const cases: [string, () => ReturnType<typeof functionUrlEvent>, number][] = [
    ['GitHub: wrong secret', () => gh(ghBody, githubHeaders(ghBody, 'not-the-secret', 'workflow_job', randomUUID())), 401],
    ['GitHub: missing signature', () => gh(ghBody, { 'X-GitHub-Event': 'workflow_job', 'X-GitHub-Delivery': randomUUID() }), 401],
    ['GitHub: truncated signature', () => gh(ghBody, ghh(ghBody, { 'X-Hub-Signature-256': ghh(ghBody)['X-Hub-Signature-256']!.slice(0, 50) })), 401],
    ['GitHub: sha1 algorithm prefix', () => gh(ghBody, ghh(ghBody, { 'X-Hub-Signature-256': ghh(ghBody)['X-Hub-Signature-256']!.replace('sha256=', 'sha1=') })), 401],
    ['GitHub: signature of another body', () => gh(ghBody, ghh('{"action":"queued"}')), 401],
    ['GitHub: empty body', () => gh('', ghh('')), 400],
    ['GitHub: not JSON', () => gh('{"action": queued', ghh('{"action": queued')), 400],
    ['GitHub: form-encoded', () => gh(`payload=${encodeURIComponent(ghBody)}`, ghh(`payload=${encodeURIComponent(ghBody)}`)), 400],
    ['GitHub: JSON array', () => gh('[1,2]', ghh('[1,2]')), 400],
    ['GitHub: workflow_job without workflow_job', () => gh('{"action":"queued","repository":{}}', ghh('{"action":"queued","repository":{}}')), 400],
    ['GitHub: workflow_job with a string id', () => {
      const body = ghBody.replace('"id":12877621891', '"id":"12877621891"');
      return gh(body, ghh(body));
    }, 400],
    ['GitHub: missing delivery id', () => gh(ghBody, ghh(ghBody, { 'X-GitHub-Delivery': '' })), 400],
    ['GitHub: missing event header', () => gh(ghBody, ghh(ghBody, { 'X-GitHub-Event': '' })), 400],
    ['GitHub: huge body', () => gh(big, ghh(big)), 413],
    ['GitHub: huge base64 body', () => gh(big, ghh(big), { base64: true }), 413],
    ['GitHub: unknown event', () => gh('{"zen":"x"}', { ...ghh('{"zen":"x"}'), 'X-GitHub-Event': 'no_such_event' }), 200],
    ['GitHub: GET', () => gh(ghBody, ghh(ghBody), { method: 'GET' }), 405],
    ['GitLab: wrong token', () => gitlabEvent('pending', { 'X-Gitlab-Token': 'not-the-token' }).event, 401],
    ['GitLab: token with an extra character', () => gitlabEvent('pending', { 'X-Gitlab-Token': `${secrets.gitlabWebhookToken}x` }).event, 401],
    ['GitLab: missing token', () => gitlabEvent('pending', { 'X-Gitlab-Token': '' }).event, 401],
    ['GitLab: empty body', () => functionUrlEvent('/gitlab', { 'X-Gitlab-Token': secrets.gitlabWebhookToken }, ''), 400],
    ['GitLab: not JSON', () => functionUrlEvent('/gitlab', { 'X-Gitlab-Token': secrets.gitlabWebhookToken }, 'object_kind=build'), 400],
    ['GitLab: Job Hook without build_id', () => gitlabEvent('pending', {}, { build_id: undefined }).event, 400],
    ['GitLab: Job Hook without project', () => gitlabEvent('pending', {}, { project_id: null, project: null }).event, 400],
    ['GitLab: no object_kind', () => functionUrlEvent('/gitlab', { 'X-Gitlab-Token': secrets.gitlabWebhookToken }, '{"build_status":"pending"}'), 400],
    ['GitLab: huge body', () => functionUrlEvent('/gitlab', { 'X-Gitlab-Token': secrets.gitlabWebhookToken }, big), 413],
    ['GitLab: unknown event', () => functionUrlEvent('/gitlab', { 'X-Gitlab-Token': secrets.gitlabWebhookToken, 'X-Gitlab-Event': 'Push Hook' }, '{"object_kind":"push"}'), 200],
    ['unknown path', () => functionUrlEvent('/bitbucket', {}, ghBody), 404],
    ['root path', () => functionUrlEvent('/', {}, ghBody), 404],
  ];
  it.each(cases.map(([name, make, status]) => [name, status, make] as const))('%s -> %s', async (_name, status, make) => {
    const res = result(await newHandler()(make()));
    expect(res.statusCode).toBe(status);
    expect(outcome(res).outcome).toBe(status === 200 ? 'ignored' : 'rejected');
    expect(await queued()).toHaveLength(0);
  });
});

describe('duplicate deliveries are queued once, across containers', () => {
  it('GitHub: the same X-GitHub-Delivery to two handler instances', async () => {
    const body = queuedSelfHosted;
    const headers = githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID());
    const [a, b] = [newHandler(), newHandler()];
    const results = await Promise.all([a(functionUrlEvent('/github', headers, body)), b(functionUrlEvent('/github', headers, body))]);
    expect(results.map((r) => result(r).statusCode)).toEqual([202, 202]);
    expect(await queued()).toHaveLength(1);
  });

  it('GitLab: a retry with the same Idempotency-Key, and a resend from GitLab before 17.4 (no key: same body)', async () => {
    const [a, b] = [newHandler(), newHandler()];
    const keyed = gitlabEvent('pending');
    expect(result(await a(keyed.event)).statusCode).toBe(202);
    expect(result(await b(keyed.event)).statusCode).toBe(202);
    const { 'idempotency-key': _drop, ...withoutKey } = keyed.event.headers;
    const old = { ...keyed.event, headers: withoutKey };
    expect(result(await a(old)).statusCode).toBe(202);
    expect(result(await b(old)).statusCode).toBe(202);
    const messages = await queued();
    // One message for the keyed delivery, one for the unkeyed one (a different delivery id).
    expect(messages).toHaveLength(2);
    const ids = messages.map((m) => parsed(m).deliveryId);
    expect(ids).toContain(keyed.event.headers['idempotency-key']);
    expect(ids.filter((id) => /^body-sha256-[0-9a-f]{48}$/.test(id))).toHaveLength(1);
  });
});

describe('log hygiene', () => {
  it('logs request text only in reduced form: no forged lines, no control characters', async () => {
    const evil = 'x\u001b[31m"}\n{"level":"error","forged":true}';
    const payload = JSON.parse(queuedSelfHosted) as { workflow_job: { labels: string[] } };
    payload.workflow_job.labels = ['self-hosted', evil];
    const body = JSON.stringify(payload);
    const start = logLines.length;
    const res = result(await newHandler()(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', `${randomUUID()}\n{"forged":true}`), body)));
    expect(res.statusCode).toBe(200);
    const lines = logLines.slice(start);
    expect(lines.length).toBeGreaterThan(0);
    for (const line of lines) {
      expect(line).not.toContain('\n');
      expect([...line].some((c) => c.charCodeAt(0) < 0x20)).toBe(false);
      expect(line).not.toContain('forged":true');
      const record = JSON.parse(line) as Record<string, unknown>;
      expect(record).not.toHaveProperty('forged');
      // The request's text is not in the record as sent: it was reduced to harmless characters.
      for (const value of Object.values(record).flat()) if (typeof value === 'string') expect(value.includes('"}') || value.includes('\u001b')).toBe(false);
    }
    expect(lines.some((l) => (JSON.parse(l) as { labels?: string[] }).labels?.some((x) => x.startsWith('x?')))).toBe(true);
  });

  it('refuses a job with more labels than a job message carries (400, nothing queued)', async () => {
    const payload = JSON.parse(queuedSelfHosted) as { workflow_job: { labels: string[] } };
    payload.workflow_job.labels = ['self-hosted', ...Array.from({ length: 70 }, (_, i) => `l${i}`)];
    const body = JSON.stringify(payload);
    const wide = buildFleetConfig({
      prefix: PREFIX,
      github: { appId: '4242', organization: 'lineville' },
      pools: [{ name: 'wide', provider: Provider.GITHUB, labels: payload.workflow_job.labels.slice(1), labelMatch: LabelMatch.SUBSET, launchTemplateId: 'lt', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t'] }],
    });
    const res = result(await newHandler({}, { [LAMBDA_ENV.fleetConfig]: JSON.stringify(wide) })(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), body)));
    expect([res.statusCode, outcome(res).reason]).toEqual([400, expect.stringMatching(/labels/)]);
    expect(await queued()).toHaveLength(0);
  });
});

describe('the request deadline (cold container, slow dependencies)', () => {
  // The fleet config comes from SSM here, as in a deployed stack; a fresh name per test, since
  // loadFleetConfig keeps a copy per container (module) for a minute.
  async function fromSsm(): Promise<Record<string, string>> {
    const name = `/${PREFIX}/fleet/config-${randomUUID()}`;
    await ssm.send(new PutParameterCommand({ Name: name, Value: JSON.stringify(config(gitlab.url)), Type: 'String' }));
    return { [LAMBDA_ENV.fleetConfig]: '', [LAMBDA_ENV.fleetConfigParameter]: name };
  }
  // Every time here (deadlines, reserves, delays, the margin) is scaled by the machine's
  // slowdown as a whole: a loaded machine makes moto's answers slower, and what is tested is
  // how the deadline splits the time among the steps, which scaling keeps.
  const f = slowdown();
  const ms = (base: number): number => Math.ceil(base * f);
  // Just under the gap to the steps' own caps (3 s against deadlines of 1.5 s): a response
  // within it was cut by the deadline, not by a cap, which the log lines then name; a wider
  // margin leaves a loaded machine room without letting a cap pass for the deadline.
  const MARGIN_MS = ms(1_400);
  // The steps' own caps (the defaults, scaled alike): each is beyond deadline + margin, so
  // only the deadline's clipping can end a slow step in time.
  const caps = { configReadTimeoutMs: ms(3_000), secretReadTimeoutMs: ms(3_000), queueTimeoutMs: ms(3_000) };

  it('slow SSM plus a GitLab that never answers: the job is queued with its tags unresolved before the deadline', async () => {
    const env = await fromSsm();
    gitlabRoute = () => 'hang';
    ssmDelayMs = ms(400); // each read: fleet config, webhook secrets, the API token for the lookup
    const deadlineMs = ms(2_500);
    // The lookup's own bound is far beyond the deadline: only the deadline can end it in time.
    const handler = newHandler({ ...caps, deadlineMs, sendReserveMs: ms(500), tagLookupTimeoutMs: ms(20_000) }, env);
    const linesBefore = logLines.length;
    const started = performance.now();
    const res = result(await handler(gitlabEvent('pending').event));
    const elapsed = performance.now() - started;
    expect([res.statusCode, outcome(res).reason], logLines.slice(linesBefore).join('\n')).toEqual([202, 'queued-labels-unresolved']);
    // The deadline cut the lookup: its share was clipped below its own bound, to what remained.
    const failure = lookupFailure(logLines.slice(linesBefore)) ?? '';
    const share = /^tag lookup exceeded its (\d+) ms share|^no time left for the tag lookup/.exec(failure);
    expect(share, failure).not.toBeNull();
    if (share![1] !== undefined) expect(Number(share![1])).toBeLessThan(deadlineMs);
    expect(elapsed).toBeLessThan(deadlineMs + MARGIN_MS);
    const messages = await queued();
    expect(messages.map((m) => parsed(m))).toEqual([expect.objectContaining({ jobId: 'gitlab:1977', labels: [], labelsResolved: false })]);
  });

  it("SSM slower than the readers' default bounds but within the handler's caps: the caps decide, and the job is queued", async () => {
    const env = await fromSsm();
    // Unscaled: beyond the fixed defaults of the fleet config read (5 s) and the secret cache
    // (3 s), which a loaded machine does not change; the caps and the deadline leave room.
    ssmDelayMs = 5_500;
    const cap = ssmDelayMs + ms(3_000);
    const handler = newHandler({ configReadTimeoutMs: cap, secretReadTimeoutMs: cap, queueTimeoutMs: cap, deadlineMs: 2 * cap + ms(1_000), sendReserveMs: ms(500) }, env);
    const linesBefore = logLines.length;
    const res = result(await handler(functionUrlEvent('/github', githubHeaders(queuedSelfHosted, secrets.githubWebhook, 'workflow_job', randomUUID()), queuedSelfHosted)));
    expect([res.statusCode, outcome(res).reason], logLines.slice(linesBefore).join('\n')).toEqual([202, 'queued']);
    ssmDelayMs = 0;
    expect(await queued()).toHaveLength(1);
  });

  it('SSM slower than the whole deadline: 503 before the deadline (the sender may redeliver), nothing queued', async () => {
    const env = await fromSsm();
    ssmDelayMs = ms(5_000);
    const deadlineMs = ms(1_500);
    const handler = newHandler({ ...caps, deadlineMs, sendReserveMs: ms(500) }, env);
    for (const event of [gitlabEvent('pending').event, functionUrlEvent('/github', githubHeaders(queuedSelfHosted, secrets.githubWebhook, 'workflow_job', randomUUID()), queuedSelfHosted)]) {
      const started = performance.now();
      const res = result(await handler(event));
      const elapsed = performance.now() - started;
      expect([res.statusCode, outcome(res).outcome]).toEqual([503, 'error']);
      expect(elapsed).toBeLessThan(deadlineMs + MARGIN_MS);
    }
    ssmDelayMs = 0;
    expect(await queued()).toHaveLength(0);
    expect(logLines.some((l) => l.includes('request deadline reached') && l.includes('"step":"fleet config read"'))).toBe(true);
  });

  it('config read in time but the webhook secret not: 503, nothing queued', async () => {
    const env = await fromSsm();
    const deadlineMs = ms(1_500);
    const handler = newHandler({ ...caps, deadlineMs, sendReserveMs: ms(500) }, env);
    // The first request reads and caches the fleet config; then SSM slows down.
    expect(result(await handler(gitlabEvent('running').event)).statusCode).toBe(200);
    ssmDelayMs = ms(5_000);
    const linesBefore = logLines.length;
    const started = performance.now();
    const res = result(await handler(functionUrlEvent('/github', githubHeaders(queuedSelfHosted, secrets.githubWebhook, 'workflow_job', randomUUID()), queuedSelfHosted)));
    expect(res.statusCode).toBe(503);
    expect(performance.now() - started).toBeLessThan(deadlineMs + MARGIN_MS);
    expect(logLines.slice(linesBefore).some((l) => l.includes('request deadline reached') && l.includes('"step":"webhook secret read"'))).toBe(true);
    ssmDelayMs = 0;
    expect(await queued()).toHaveLength(0);
  });
});

describe('a job whose queue message would exceed the SQS message size', () => {
  /** A pending Job Hook (real fixture) whose project name makes the message `bytes` long. */
  async function sizedEvent(bytes: number) {
    // The message grows one byte per character of the project name: measure one, then size it.
    const probe = gitlabEvent('pending', { 'Idempotency-Key': randomUUID() }, { project: { ...(jobHook.project as object), path_with_namespace: 'gitlab-org/p' } });
    expect(result(await newHandler()(probe.event)).statusCode).toBe(202);
    const [m] = await queued();
    const overhead = Buffer.byteLength(m!.Body!) - 1;
    // Out of the way: a FIFO group delivers nothing more while a received message is in flight.
    await sqs.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m!.ReceiptHandle! }));
    const name = 'p'.repeat(bytes - overhead);
    return gitlabEvent('pending', { 'Idempotency-Key': randomUUID() }, { project: { ...(jobHook.project as object), path_with_namespace: `gitlab-org/${name}` } });
  }

  it(`is queued at exactly ${JOB_MESSAGE_MAX_BYTES} bytes`, async () => {
    const res = result(await newHandler()((await sizedEvent(JOB_MESSAGE_MAX_BYTES)).event));
    expect([res.statusCode, outcome(res).reason]).toEqual([202, 'queued']);
    const [m] = await queued();
    expect(Buffer.byteLength(m!.Body!)).toBe(JOB_MESSAGE_MAX_BYTES);
    expect(await queued(deadLetterQueueUrl)).toHaveLength(0);
  });

  it('one byte more: 200 too-large, counted, and a small summary in the dead-letter queue (once per delivery)', async () => {
    const { event } = await sizedEvent(JOB_MESSAGE_MAX_BYTES + 1);
    const metricsBefore = metricLines.length;
    const handler = newHandler();
    const res = result(await handler(event));
    expect([res.statusCode, outcome(res)]).toEqual([200, { outcome: 'ignored', reason: 'too-large' }]);
    // A redelivery of the same delivery answers the same and is recorded once.
    expect(outcome(await handler(event)).reason).toBe('too-large');
    expect(await queued()).toHaveLength(0);
    const dead = await queued(deadLetterQueueUrl);
    expect(dead).toHaveLength(1);
    expect(Buffer.byteLength(dead[0]!.Body!)).toBeLessThan(1024);
    const summary = JSON.parse(dead[0]!.Body!) as Record<string, unknown>;
    expect(summary).toEqual({
      reason: 'too-large',
      provider: Provider.GITLAB,
      deliveryId: event.headers['idempotency-key'],
      jobId: 'gitlab:1977',
      traceId: event.headers['idempotency-key'],
      sizeBytes: JOB_MESSAGE_MAX_BYTES + 1,
      maxBytes: JOB_MESSAGE_MAX_BYTES,
    });
    expect(dead[0]!.MessageAttributes?.['dead-letter-reason']?.StringValue).toBe('too-large');
    expect(dead[0]!.Attributes?.MessageGroupId).toBe('gitlab:1977');
    const counted = metricLines.slice(metricsBefore).map((l) => JSON.parse(l) as Record<string, unknown>).filter((r) => r[METRIC_NAMES.deadLettered] === 1);
    expect(counted).toHaveLength(2);
    expect(counted[0]).toMatchObject({ Pool: 'gl-docker', Reason: 'too-large' });
  });

  it.each([
    ['refuses the record', (dlq: string) => ({ [LAMBDA_ENV.deadLetterQueueUrl]: `${dlq.slice(0, dlq.lastIndexOf('/'))}/no-such-queue.fifo` })],
    ['is not configured', () => ({ [LAMBDA_ENV.deadLetterQueueUrl]: '' })],
  ])('answers 500 when the dead-letter queue %s, so the sender redelivers', async (_name, env) => {
    const { event } = await sizedEvent(JOB_MESSAGE_MAX_BYTES + 1);
    const res = result(await newHandler({}, env(deadLetterQueueUrl))(event));
    expect(res.statusCode).toBe(500);
    expect(await queued()).toHaveLength(0);
    expect(await queued(deadLetterQueueUrl)).toHaveLength(0);
  });
});

describe('failures', () => {
  it('answers 500 when the queue refuses the message, so the sender can redeliver', async () => {
    const handler = newHandler({}, { [LAMBDA_ENV.jobsQueueUrl]: `${moto.endpoint}/123456789012/no-such-queue.fifo` });
    const body = queuedSelfHosted;
    const res = result(await handler(functionUrlEvent('/github', githubHeaders(body, secrets.githubWebhook, 'workflow_job', randomUUID()), body)));
    expect(res.statusCode).toBe(500);
  });

  it('answers 500 and logs when the fleet config is unreadable', async () => {
    const res = result(await newHandler({}, { [LAMBDA_ENV.fleetConfig]: '{"version":9}' })(functionUrlEvent('/github', {}, '{}')));
    expect(res.statusCode).toBe(500);
  });
});

describe('secrets', () => {
  it('are read from SSM once per container', async () => {
    const handler = newHandler();
    const before = ssmReads;
    for (let i = 0; i < 3; i++) await handler(gitlabEvent('pending').event);
    for (let i = 0; i < 3; i++) await handler(functionUrlEvent('/github', githubHeaders('{}', secrets.githubWebhook, 'ping', randomUUID()), '{}'));
    // GitLab webhook token + signing key (absent) + API token for the tag lookup + GitHub webhook secret.
    expect(ssmReads - before).toBe(4);
  });

  it('never appear in any log line of this file, in plain, base64 or URL-encoded form', () => {
    expect(logLines.length).toBeGreaterThan(50);
    const all = [...logLines, ...metricLines, ...consoleLines].join('\n');
    for (const secret of Object.values(secrets)) for (const form of secretForms(secret)) expect(all.includes(form), form).toBe(false);
  });
});
