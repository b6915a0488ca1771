import { EC2Client, RunInstancesCommand, StartInstancesCommand, StopInstancesCommand } from '@aws-sdk/client-ec2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../lambdas/shared/log';
import { classifyGitHubDelivery } from '../../lambdas/webhook/github-delivery';
import { classifyGitLabDelivery } from '../../lambdas/webhook/gitlab-delivery';
import type { Classified } from '../../lambdas/webhook/delivery';
import { isLateDelivery } from '../../lambdas/scale-up/decide';
import { RETRY_STARTED_MESSAGE } from '../../lambdas/scale-up/retry-check';
import { RECONCILED_MESSAGE } from '../../lambdas/reconcile/handler';
import { verifyGitHubSignature, verifyGitLabToken } from '../../lambdas/webhook/verify';
import { refuseStartOfOneInstance } from '../../local/aws-faults';
import { functionUrlEvent, githubWorkflowJobQueued, gitlabJobPending, withBadSignature } from '../../local/deliveries';
import { PutParameterCommand } from '@aws-sdk/client-ssm';
import { DEFAULT_PREFIX, ssmPaths, GitLabRunnerType, Provider, type PoolConfig } from '../../lambdas/shared/contract';
import { eventOfLogLine, localClients, toRecord } from '../../local/lambdas';
import { provision } from '../../local/provision';
import { startMoto, type MotoServer } from '../support/moto';

const github = { appId: '1', organization: 'example-org', repositories: [], runnerGroupId: 1, apiUrl: 'http://127.0.0.1:1' };
const gitlab = { url: 'http://127.0.0.1:2', runnerType: GitLabRunnerType.GROUP as const, scopeId: 42 };

const jobOf = (c: Classified) => {
  if (c.kind !== 'job') throw new Error(`not a job: ${c.kind}`);
  return c.job;
};

describe('deliveries: what the webhook handler verifies and classifies', () => {
  const secret = 'webhook-secret';
  it('a queued workflow_job, signed with the secret, is a job with its id, repository and labels', () => {
    const d = githubWorkflowJobQueued({ jobId: 77, runId: 5, repository: 'example-org/app', labels: ['self-hosted', 'linux', 'x64'] }, secret);
    expect(verifyGitHubSignature(Buffer.from(d.body), d.headers['x-hub-signature-256'], secret)).toEqual({ ok: true });
    expect(classifyGitHubDelivery(d.headers['x-github-event']!, JSON.parse(d.body), github, [{ name: 'p', provider: Provider.GITHUB } as PoolConfig])).toEqual({
      kind: 'job',
      job: { provider: Provider.GITHUB, providerJobId: '77', owner: 'example-org', project: 'app', labels: ['self-hosted', 'linux', 'x64'], createdAt: expect.any(String) },
    });
    // Created now, not at the documentation example's time: a local job is not a late delivery.
    expect(isLateDelivery(jobOf(classifyGitHubDelivery(d.headers['x-github-event']!, JSON.parse(d.body), github, [{ name: 'p', provider: Provider.GITHUB } as PoolConfig])), new Date())).toBe(false);
    const bad = withBadSignature(d);
    expect(bad.body).toBe(d.body);
    expect(verifyGitHubSignature(Buffer.from(bad.body), bad.headers['x-hub-signature-256'], secret).ok).toBe(false);
  });

  it('a pending Job Hook with the token is a job of its project, its tags left for the lookup', () => {
    const d = gitlabJobPending({ buildId: 88, projectId: 4711, projectPath: 'example-group/app' }, secret, 'delivery-1');
    expect(verifyGitLabToken(d.headers['x-gitlab-token'], secret)).toEqual({ ok: true });
    expect(d.headers['idempotency-key']).toBe('delivery-1');
    expect(classifyGitLabDelivery(JSON.parse(d.body), gitlab)).toEqual({
      kind: 'job',
      job: { provider: Provider.GITLAB, providerJobId: '88', owner: 'example-group', project: 'app', projectId: 4711, labels: [], createdAt: expect.any(String) },
    });
    expect(isLateDelivery(jobOf(classifyGitLabDelivery(JSON.parse(d.body), gitlab)), new Date())).toBe(false);
    expect(verifyGitLabToken(withBadSignature(d).headers['x-gitlab-token'], secret).ok).toBe(false);
  });

  it('wraps a delivery as a Function URL event (payload format 2.0, lower-case headers, raw body)', () => {
    const d = githubWorkflowJobQueued({ jobId: 1, runId: 1, repository: 'example-org/app', labels: ['self-hosted'] }, secret);
    const e = functionUrlEvent(d);
    expect(e).toMatchObject({ version: '2.0', rawPath: '/github', body: d.body, isBase64Encoded: false, requestContext: { http: { method: 'POST' } } });
    expect(Object.keys(e.headers).every((k) => k === k.toLowerCase())).toBe(true);
  });
});

describe('timeline facts from the handlers\' log lines', () => {
  const line = (fn: string, message: string, fields: Record<string, unknown>) => {
    let out = '';
    createLogger({ fn }, (l) => (out = l)).info(message, fields as never);
    return out;
  };
  it.each<[string, 'webhook' | 'scale-up' | 'pool' | 'reconcile', string, Record<string, unknown>, string[]]>([
    ['a job the reconciler found', 'reconcile', RECONCILED_MESSAGE, { traceId: 't', jobId: 'gitlab:3', pool: 'p' }, ['queued']],
    ['a retry of a job whose runner went elsewhere', 'scale-up', RETRY_STARTED_MESSAGE, { traceId: 't', jobId: 'github:12', attempt: 2 }, ['retried']],
    ['the reconciler\'s summary is no job fact', 'reconcile', 'reconciled', { traceId: 't' }, []],
    ['webhook queued', 'webhook', 'job queued', { traceId: 't', jobId: 'github:12', pool: 'p' }, ['queued']],
    ['warm start', 'scale-up', 'warm activation started the instance', { traceId: 't', jobId: 'github:12', instanceId: 'i-1' }, ['started']],
    ['cold launch', 'scale-up', 'cold launch started an instance', { traceId: 't', jobId: 'gitlab:3', instanceId: 'i-2' }, ['started']],
    ['dead letter', 'scale-up', 'job dead-lettered', { traceId: 't', jobId: 'github:12', reason: 'no-pool' }, ['dead-lettered']],
    ['held by the prime back-off', 'scale-up', "the pool's prime back-off holds cold launches (backoff), job waits", { traceId: 't', jobId: 'gitlab:3', waits: 1 }, ['held']],
    ['the pool-level hold line names no job and is not a job fact', 'scale-up', 'prime back-off: holding cold launches back', { traceId: 't' }, []],
    ['a webhook ledger stage', 'webhook', 'ledger', { traceId: 't', jobId: 'github:12', pool: 'p', stage: 'queued', at: '2026-11-29T20:00:00.250Z', seconds: 0.25 }, ['stage']],
    ['a scale-up ledger stage', 'scale-up', 'ledger', { traceId: 't', jobId: 'gitlab:3', pool: 'p', stage: 'claimed', at: '2026-11-29T20:00:01.000Z', seconds: 1 }, ['stage']],
    ['a ledger line without its seconds is none', 'scale-up', 'ledger', { traceId: 't', jobId: 'gitlab:3', stage: 'claimed' }, []],
    ['a fallback is not a start', 'scale-up', 'warm activation fell back to a cold launch', { traceId: 't' }, []],
    ['the same words from another function', 'pool', 'job queued', { traceId: 't' }, []],
  ])('%s', (_name, fn, message, fields, kinds) => {
    const events = eventOfLogLine(fn, line(fn, message, fields));
    expect(events.map((e) => e.kind)).toEqual(kinds);
    for (const e of events) {
      expect(e.traceId).toBe('t');
      if (typeof fields.jobId === 'string') expect(`${e.provider}:${e.ciJobId}`).toBe(fields.jobId);
      if (fields.instanceId) expect(e.instanceId).toBe(fields.instanceId);
    }
  });
  it('a ledger stage is at its own time, with its stage and seconds', () => {
    const [e] = eventOfLogLine('scale-up', line('scale-up', 'ledger', { traceId: 't', jobId: 'github:12', pool: 'p', stage: 'launched', at: '2026-11-29T20:00:01.500Z', seconds: 1.5 }));
    expect(e).toMatchObject({ kind: 'stage', t: Date.parse('2026-11-29T20:00:01.500Z'), detail: 'launched', seconds: 1.5, traceId: 't', provider: 'github', ciJobId: '12' });
  });
  it('ignores lines that are not JSON (EMF records are JSON without a message)', () => {
    expect(eventOfLogLine('webhook', 'not json')).toEqual([]);
    expect(eventOfLogLine('webhook', JSON.stringify({ _aws: {}, JobsReceived: 1 }))).toEqual([]);
  });
});

describe('the event source mapping\'s record', () => {
  it('carries the attributes scale-up reads (receive count, group) and the message attributes', () => {
    const r = toRecord(
      {
        MessageId: 'm',
        ReceiptHandle: 'rh',
        Body: '{}',
        Attributes: { ApproximateReceiveCount: '3', MessageGroupId: 'github:1' },
        MessageAttributes: { 'capacity-waits': { DataType: 'Number', StringValue: '2' } },
      },
      'http://127.0.0.1:5000/123456789012/warm-runners-jobs.fifo',
    );
    expect(r).toMatchObject({
      messageId: 'm',
      receiptHandle: 'rh',
      attributes: { ApproximateReceiveCount: '3', MessageGroupId: 'github:1' },
      messageAttributes: { 'capacity-waits': { stringValue: '2', dataType: 'Number' } },
      eventSourceARN: 'arn:aws:sqs:us-east-1:123456789012:warm-runners-jobs.fifo',
    });
  });
});

describe('fault: StartInstances refused for one instance (moto)', () => {
  let moto: MotoServer;
  beforeAll(async () => {
    moto = await startMoto();
  });
  afterAll(async () => moto?.stop());

  it('refuses every start that includes the first instance, as a server-side capacity error, and passes the rest', async () => {
    const ec2 = new EC2Client({ endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' }, maxAttempts: 1 });
    const out = await ec2.send(new RunInstancesCommand({ ImageId: 'ami-12c6146b', MinCount: 2, MaxCount: 2 }));
    const [a, b] = out.Instances!.map((i) => i.InstanceId!) as [string, string];
    await ec2.send(new StopInstancesCommand({ InstanceIds: [a, b] }));
    const refused: string[] = [];
    const fault = refuseStartOfOneInstance(ec2, (id) => refused.push(id));
    const error = await ec2.send(new StartInstancesCommand({ InstanceIds: [a, b] })).catch((e: unknown) => e as { name: string; $fault: string; $metadata: { httpStatusCode: number } });
    expect(error).toMatchObject({ name: 'InsufficientInstanceCapacity', $fault: 'server', $metadata: { httpStatusCode: 500 } });
    const started = await ec2.send(new StartInstancesCommand({ InstanceIds: [b] }));
    expect(started.StartingInstances?.[0]).toMatchObject({ InstanceId: b, PreviousState: { Name: 'stopped' } });
    await expect(ec2.send(new StartInstancesCommand({ InstanceIds: [a] }))).rejects.toMatchObject({ name: 'InsufficientInstanceCapacity' });
    expect(refused).toEqual([a, a]);
    expect(fault.instanceId()).toBe(a);
    fault.remove();
    expect((await ec2.send(new StartInstancesCommand({ InstanceIds: [a] }))).StartingInstances?.[0]?.InstanceId).toBe(a);
  });

  it('provisioning refuses a moto that already holds a fleet, naming what it found and what to do', async () => {
    const clients = localClients(moto.endpoint);
    await clients.ssm.send(new PutParameterCommand({ Name: ssmPaths(DEFAULT_PREFIX).fleetConfig, Value: '{}', Type: 'String' }));
    const options = {
      local: { poolSize: 1, githubApiUrl: 'http://127.0.0.1:1', gitlabUrl: 'http://127.0.0.1:2' },
      credentials: { githubAppPrivateKeyPem: 'x', gitlabAccessToken: 'y' },
      machine: { prefix: DEFAULT_PREFIX, awsEndpoint: moto.endpoint, sandboxRoot: '/nonexistent' },
    };
    await expect(provision(clients, options)).rejects.toThrow(/already holds a fleet \(\/warm-runners\/fleet\/config exists\).*moto-api\/reset/);
  });
});
