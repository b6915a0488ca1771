import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { GitHubProvider } from '../../lambdas/ci';
import { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { buildFleetConfig, LabelMatch, Provider, type FleetConfig, type JobMessage } from '../../lambdas/shared/contract';
import { startLoopbackGitHub, type LoopbackGitHub } from '../../local/ci/github-server';
import { Lines } from '../support/fixtures';

/**
 * Scale-set pools' jobs come from GitHub's assignment (docs/scale-set.md): the reconciler
 * neither scans their scopes nor queues their jobs, and makes no GitHub request at all for a
 * fleet whose GitHub pools are all scale sets. The real GitHub provider against the loopback
 * GitHub; the queue behind aws-sdk-client-mock.
 */
const ORG = 'acme';
const OTHER = 'other';
const sqs = mockClient(SQSClient);
let gh: LoopbackGitHub;
let queued: JobMessage[];

function fleet(pools: { name: string; labels: string[]; scaleSetName?: string; repositories?: string[]; labelMatch?: LabelMatch }[]): FleetConfig {
  const base = { launchTemplateId: 'lt-0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'] };
  return buildFleetConfig({ prefix: 'rss', github: { appId: gh.appId, organization: ORG, apiUrl: gh.url }, pools: pools.map((p) => ({ provider: Provider.GITHUB, ...base, ...p })) });
}

function reconcile(config: FleetConfig, lines = new Lines()) {
  const github = new GitHubProvider({ prefix: config.prefix, github: config.github!, pools: config.pools, privateKey: async () => gh.privateKeyPem, sleep: async () => {} });
  return createReconcileHandler({
    sqs: new SQSClient({ region: 'eu-west-1' }),
    aws: new AwsCaller({ sleep: async () => {}, baseDelayMs: 1 }),
    loadConfig: async () => config,
    providers: () => ({ github }),
    queueUrl: 'https://sqs.local/jobs.fifo',
    sink: lines.sink,
    options: { github: { minQueuedSeconds: 0 } },
  })();
}

/** The GitHub requests of the reconciler's scan (token minting and installation lookups aside). */
const scanRequests = () =>
  gh
    .requests()
    .filter((r) => !/\/access_tokens$|\/installation$/.test(r.path))
    .map((r) => `${r.method} ${r.path}`);

beforeEach(async () => {
  gh = await startLoopbackGitHub({ organization: ORG, organizations: [OTHER] });
  queued = [];
  sqs.reset();
  sqs.on(SendMessageCommand).callsFake((input: { MessageBody: string }) => {
    queued.push(JSON.parse(input.MessageBody) as JobMessage);
    return { MessageId: String(queued.length) };
  });
});
afterEach(async () => gh.close());
afterAll(() => sqs.restore());

describe('reconciler and scale-set pools', () => {
  it("scans only the webhook pools' scopes: a scale-set pool's organisation is not read and its jobs are not queued", async () => {
    // acme's jobs are the scale set's (GitHub assigns them); other's come from webhooks.
    const config = fleet([
      { name: 'arc', labels: ['linux'], scaleSetName: 'arc-linux' },
      { name: 'hooks', labels: ['linux'], repositories: [`${OTHER}/app`] },
    ]);
    const assigned = gh.addJob(`${ORG}/web`, ['arc-linux']);
    const notScanned = gh.addJob(`${ORG}/web`, ['self-hosted', 'linux']); // hooks serves only other/app
    const webhookJob = gh.addJob(`${OTHER}/app`, ['self-hosted', 'linux']);

    const report = await reconcile(config);

    expect(queued.map((m) => [m.jobId, m.pool])).toEqual([[`github:${webhookJob.id}`, 'hooks']]);
    expect(report).toMatchObject({ queued: 1 });
    const scan = scanRequests();
    expect(scan.filter((r) => r.includes(`/repos/${ORG}/`))).toEqual([]);
    expect(scan.filter((r) => r.includes(`/repos/${OTHER}/app/`)).length).toBeGreaterThan(0);
    // A repository pool's repositories are named: no installation's repository list is read.
    expect(scan.filter((r) => r.endsWith('/installation/repositories'))).toEqual([]);
    expect([assigned, notScanned].map((j) => gh.jobs().find((x) => x.id === j.id)?.status)).toEqual(['queued', 'queued']);
  });

  it("in a webhook pool's scope, only the jobs naming the scale set are left alone (hooks [linux], ss [linux, x64] named fast)", async () => {
    // Both pools in acme: the scan reads acme's repositories. GitHub assigns the scale set only
    // the jobs naming it (its only label), so a job the scale-set pool's labels fit better is hooks'.
    const config = fleet([
      { name: 'ss', labels: ['linux', 'x64'], scaleSetName: 'fast' },
      { name: 'hooks', labels: ['linux'], repositories: [`${ORG}/app`] },
    ]);
    gh.addJob(`${ORG}/app`, ['fast']);
    gh.addJob(`${ORG}/app`, ['self-hosted', 'fast']);
    const linux = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux']);
    gh.addJob(`${ORG}/app`, ['self-hosted', 'linux', 'x64']); // nobody's: fits no webhook pool, not named by the scale set
    await reconcile(config);
    expect(scanRequests().filter((r) => r.endsWith('/jobs')).length).toBeGreaterThan(0);
    expect(queued.map((m) => [m.jobId, m.pool])).toEqual([[`github:${linux.id}`, 'hooks']]);
  });

  it('a job the scale-set pool fits better than a webhook pool is queued for the webhook pool (GitHub would not assign it to the scale set)', async () => {
    const config = fleet([
      { name: 'ss', labels: ['linux', 'x64'], scaleSetName: 'fast' },
      { name: 'big', labels: ['linux', 'x64', 'big'], labelMatch: LabelMatch.SUBSET, repositories: [`${ORG}/app`] },
    ]);
    const job = gh.addJob(`${ORG}/app`, ['self-hosted', 'linux', 'x64']);
    await reconcile(config);
    expect(queued.map((m) => [m.jobId, m.pool])).toEqual([[`github:${job.id}`, 'big']]);
  });

  it('makes no GitHub request when every GitHub pool is a scale set', async () => {
    const config = fleet([
      { name: 'arc', labels: ['linux'], scaleSetName: 'arc-linux' },
      { name: 'app', labels: ['linux'], scaleSetName: 'arc-app', repositories: [`${OTHER}/app`] },
    ]);
    gh.addJob(`${ORG}/web`, ['arc-linux']);
    gh.addJob(`${OTHER}/app`, ['arc-app']);
    gh.recordDelivery(gh.addJob(`${ORG}/web`, ['arc-linux']).id, 503);
    expect(await reconcile(config)).toEqual({ redelivered: 0, queued: 0, requests: 0 });
    expect(gh.requests()).toEqual([]);
    expect(queued).toEqual([]);
  });
});
