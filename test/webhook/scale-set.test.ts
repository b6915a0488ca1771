import { randomUUID } from 'node:crypto';
import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { GetParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import examples from '@octokit/webhooks-examples';
import type { APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { buildFleetConfig, LAMBDA_ENV, parseJobMessage, Provider, ssmPaths, type JobMessage } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { createWebhookHandler } from '../../lambdas/webhook/handler';
import { functionUrlEvent, githubHeaders, plantSecret } from './support';

/**
 * A GitHub job of a scale-set pool is GitHub's to assign (docs/scale-set.md): the webhook
 * answers its `workflow_job` delivery without queuing it, and says why, while a job of a
 * webhook pool of the same fleet is queued as always. The delivery is GitHub's documented
 * queued example (@octokit/webhooks-examples), its labels set per case.
 */
const PREFIX = 'wh-ss';
const SECRET = plantSecret('gh-webhook-ss');
const NOW = new Date('2026-11-29T19:00:00.000Z');
const ssm = mockClient(SSMClient);
const sqs = mockClient(SQSClient);
type Example = { action: string; repository: { full_name: string }; workflow_job: { id: number; labels: string[] } };
const queuedExample = (examples.find((e) => e.name === 'workflow_job')!.examples as unknown as Example[]).find((e) => e.action === 'queued' && e.workflow_job.labels.includes('k8s'))!;
const REPO = queuedExample.repository.full_name; // lineville/elastic-machines-testing

const config = buildFleetConfig({
  prefix: PREFIX,
  github: { appId: '4242', repositories: [REPO, 'Codertocat/Hello-World'] },
  pools: [
    // The scale set "arc-k8s" of the example's repository: workflows say runs-on: arc-k8s (its only label at GitHub).
    { name: 'arc', provider: Provider.GITHUB, labels: ['linux', 'x64', 'k8s'], scaleSetName: 'arc-k8s', repositories: [REPO], launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] },
    { name: 'hooks', provider: Provider.GITHUB, labels: ['linux'], launchTemplateId: 'lt-2', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] },
  ],
});

let sent: JobMessage[];
let logLines: string[];

function handler() {
  return createWebhookHandler({
    ssm: new SSMClient({ region: 'eu-west-1' }),
    sqs: new SQSClient({ region: 'eu-west-1' }),
    now: () => NOW,
    logger: createLogger({ fn: 'webhook' }, (l) => logLines.push(l)),
    metricSink: () => {},
    env: { [LAMBDA_ENV.fleetConfig]: JSON.stringify(config), [LAMBDA_ENV.jobsQueueUrl]: 'https://sqs.local/jobs.fifo', [LAMBDA_ENV.deadLetterQueueUrl]: 'https://sqs.local/dlq.fifo' },
  });
}

/** GitHub's queued delivery of the example job, asking for `labels`. */
async function deliver(labels: string[]): Promise<{ statusCode: number; outcome: string; reason: string }> {
  const payload = { ...queuedExample, workflow_job: { ...queuedExample.workflow_job, id: queuedExample.workflow_job.id + sent.length + logLines.length, labels } };
  const body = JSON.stringify(payload);
  const res = (await handler()(functionUrlEvent('/github', githubHeaders(body, SECRET, 'workflow_job', randomUUID()), body))) as APIGatewayProxyStructuredResultV2;
  return { statusCode: res.statusCode!, ...(JSON.parse(res.body!) as { outcome: string; reason: string }) };
}

beforeEach(() => {
  sent = [];
  logLines = [];
  ssm.reset();
  ssm.on(GetParameterCommand, { Name: ssmPaths(PREFIX).github.webhookSecret }).resolves({ Parameter: { Value: SECRET } });
  sqs.reset();
  sqs.on(SendMessageCommand).callsFake((input: { MessageBody: string }) => {
    sent.push(parseJobMessage(input.MessageBody));
    return { MessageId: 'm' };
  });
});
afterAll(() => {
  ssm.restore();
  sqs.restore();
});

const notQueuedLines = () => logLines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.message === 'delivery acknowledged, not queued');

describe('webhook and scale-set pools', () => {
  it.each([
    ['names the scale set', ['arc-k8s']],
    ['names the scale set and self-hosted', ['self-hosted', 'arc-k8s']],
  ])('a queued job that %s is acknowledged without queuing, and the log says why', async (_, labels) => {
    expect(await deliver(labels)).toEqual({ statusCode: 200, outcome: 'ignored', reason: 'scale-set' });
    expect(sent).toEqual([]);
    expect(sqs.commandCalls(SendMessageCommand)).toHaveLength(0);
    expect(notQueuedLines()).toMatchObject([{ reason: 'scale-set' }]);
  });

  it("a job of the same fleet's webhook pool is queued for it, though the scale-set pool's labels fit it better (GitHub does not assign it to the scale set)", async () => {
    const res = await deliver(['self-hosted', 'linux']);
    expect([res.statusCode, res.outcome]).toEqual([202, 'queued']);
    expect(sent.map((m) => [m.pool, `${m.owner}/${m.project}`])).toEqual([['hooks', REPO]]);
    expect(notQueuedLines()).toEqual([]);
  });

  it("a job asking for the scale-set pool's labels without its name is no scale-set job: it fits no webhook pool, as for any fleet", async () => {
    const res = await deliver(['self-hosted', 'linux', 'x64', 'k8s']);
    expect(res).toMatchObject({ statusCode: 200, reason: 'no-matching-pool' });
    expect(sent).toEqual([]);
  });
});
