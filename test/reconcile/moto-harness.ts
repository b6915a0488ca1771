import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DescribeInstancesCommand } from '@aws-sdk/client-ec2';
import { CreateQueueCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { GetParameterCommand, PutParameterCommand } from '@aws-sdk/client-ssm';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { expect } from 'vitest';
import { GitHubProvider, GitLabProvider } from '../../lambdas/ci';
import { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { DynamoJobRecords } from '../../lambdas/scale-up/job-record';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { decodeRunnerConfig, GitLabRunnerType, GitLabWebhookOwner, LAMBDA_ENV, Provider, type CiProvider, type FleetConfig, type RunnerConfig } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { createWebhookHandler, type WebhookOptions } from '../../lambdas/webhook/handler';
import type { LoopbackGitHub } from '../../local/ci/github-server';
import type { LoopbackGitLab } from '../../local/ci/gitlab-server';
import { INSTANCE_ARN_PREFIX, KEYS, Lines, PREFIX } from '../support/fixtures';
import { createJobRecordTable, drainQueue, motoFleet, type MotoClients } from '../support/moto-fleet';
import type { FileMoto } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

type Providers = Partial<Record<'github' | 'gitlab', CiProvider>>;
type ReconcileOptions = Parameters<typeof createReconcileHandler>[0]['options'];

/**
 * The fleet the reconciler tests run against a loopback CI server: one pool on moto, the jobs
 * queue, the per-job record table, and the real webhook, reconciler and scale-up wired to
 * them. The GitHub and GitLab tests differ only in the CI part of the config and the provider.
 */
export class ReconcileFleet {
  readonly lines = new Lines();

  private constructor(
    readonly c: MotoClients,
    private readonly dynamo: DynamoDBClient,
    readonly config: FleetConfig,
    readonly queueUrl: string,
  ) {}

  /**
   * A fresh moto (reset), one pool labelled `linux` made into the CI's by `ci`, and the CI
   * credentials put in SSM (`secrets`: parameter name to value).
   */
  static async start({ moto, c, dynamo }: FileMoto, ci: (base: FleetConfig) => FleetConfig, secrets: (config: FleetConfig) => Record<string, string>): Promise<ReconcileFleet> {
    await moto.reset();
    const base = await motoFleet(c, { labels: ['linux'] });
    // moto's instances never boot, so no runner ever proves the launch template: with the
    // default limit the cold gate would hold all but `primeFailureLimit` of a run's jobs (that
    // is the back-off's own test, test/integration/cold-backoff.moto.test.ts; here every job
    // found must launch).
    const config = ci({ ...base, pools: base.pools.map((p) => ({ ...p, warm: { ...p.warm, primeFailureLimit: 100 } })) });
    const queueUrl = (await c.sqs.send(new CreateQueueCommand({ QueueName: 'jobs.fifo', Attributes: { FifoQueue: 'true' } }))).QueueUrl!;
    for (const [Name, Value] of Object.entries(secrets(config))) await c.ssm.send(new PutParameterCommand({ Name, Type: 'SecureString', Value }));
    await createJobRecordTable(dynamo, 'records');
    return new ReconcileFleet(c, dynamo, config, queueUrl);
  }

  /** The fleet with the loopback GitHub as its GitHub App's organisation, and the webhook secret in SSM. */
  static github(m: FileMoto, gh: LoopbackGitHub, webhookSecret: string): Promise<ReconcileFleet> {
    return ReconcileFleet.start(
      m,
      (base) => ({ ...base, github: { ...base.github!, appId: gh.appId, organization: gh.organization, apiUrl: gh.url } }),
      (config) => ({ [config.parameters.github.webhookSecret]: webhookSecret }),
    );
  }

  /** The fleet's pool made GitLab's, its group runners and group hook 1 at the loopback GitLab, the tokens in SSM. */
  static gitlab(m: FileMoto, gl: LoopbackGitLab, groupId: number, webhookToken: string): Promise<ReconcileFleet> {
    return ReconcileFleet.start(
      m,
      ({ github: _github, ...base }) => ({
        ...base,
        pools: base.pools.map((p) => ({ ...p, provider: Provider.GITLAB })),
        gitlab: { url: gl.url, runnerType: GitLabRunnerType.GROUP, scopeId: groupId, webhook: { owner: GitLabWebhookOwner.GROUP, ownerId: groupId, hookId: 1 } },
      }),
      (config) => ({ [config.parameters.gitlab.webhookToken]: webhookToken, [config.parameters.gitlab.token]: gl.accessToken }),
    );
  }

  githubProvider(gh: LoopbackGitHub): GitHubProvider {
    return new GitHubProvider({ prefix: PREFIX, github: this.config.github!, pools: this.config.pools, privateKey: async () => gh.privateKeyPem, sleep: async () => {} });
  }

  gitlabProvider(gl: LoopbackGitLab): GitLabProvider {
    return new GitLabProvider({ prefix: PREFIX, gitlab: this.config.gitlab!, pools: this.config.pools, token: async () => gl.accessToken, sleep: async () => {} });
  }

  aws(): AwsCaller {
    return new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
  }

  webhook(options?: WebhookOptions) {
    return createWebhookHandler({
      ssm: this.c.ssm,
      sqs: this.c.sqs,
      env: { [LAMBDA_ENV.fleetConfig]: JSON.stringify(this.config), [LAMBDA_ENV.jobsQueueUrl]: this.queueUrl },
      logger: createLogger({ fn: 'webhook' }, this.lines.sink),
      metricSink: this.lines.sink,
      ...(options ? { options } : {}),
    });
  }

  reconciler(providers: Providers, options: ReconcileOptions = {}, now?: () => Date) {
    return createReconcileHandler({ sqs: this.c.sqs, aws: this.aws(), loadConfig: async () => this.config, providers: () => providers, queueUrl: this.queueUrl, sink: this.lines.sink, ...(now ? { now } : {}), options });
  }

  /** Scale-up with its per-job record; `now` moves its clock (the retry's `retryAfter` is judged by it). */
  scaleUp(providers: Providers, now?: () => Date) {
    return createScaleUpHandler({
      ...this.c,
      aws: this.aws(),
      loadConfig: async () => this.config,
      providers: () => providers,
      queueUrl: this.queueUrl,
      deadLetterQueueUrl: 'unused',
      instanceArnPrefix: INSTANCE_ARN_PREFIX,
      jobRecords: new DynamoJobRecords(this.aws(), this.dynamo, 'records'),
      sink: this.lines.sink,
      ...(now ? { now } : {}),
    });
  }

  /** Feeds the jobs queue to scale-up until it is empty. */
  async drain(run: (event: SQSEvent) => Promise<SQSBatchResponse>): Promise<void> {
    await drainQueue(this.c.sqs, this.queueUrl, run, 20);
    const left = await this.c.sqs.send(new ReceiveMessageCommand({ QueueUrl: this.queueUrl, MaxNumberOfMessages: 1 }));
    expect(left.Messages ?? []).toEqual([]);
  }

  /** Job id tag → trace id tags of the instances serving it (pending or running). */
  async served(): Promise<Map<string, string[]>> {
    const byJob = new Map<string, string[]>();
    for (const i of await this.serving()) (byJob.get(i.jobId) ?? byJob.set(i.jobId, []).get(i.jobId)!).push(i.traceId);
    return byJob;
  }

  /** The instances serving a job (pending or running), oldest launch first, with their job and trace id tags. */
  async serving(): Promise<{ instanceId: string; jobId: string; traceId: string }[]> {
    const out = await this.c.ec2.send(new DescribeInstancesCommand({ Filters: [{ Name: 'tag-key', Values: [KEYS.jobId] }, { Name: 'instance-state-name', Values: ['pending', 'running'] }] }));
    return (out.Reservations ?? [])
      .flatMap((r) => r.Instances ?? [])
      .sort((a, b) => (a.LaunchTime?.getTime() ?? 0) - (b.LaunchTime?.getTime() ?? 0))
      .map((i) => {
        const tag = (k: string) => i.Tags?.find((t) => t.Key === k)?.Value ?? '';
        return { instanceId: i.InstanceId!, jobId: tag(KEYS.jobId), traceId: tag(KEYS.traceId) };
      });
  }

  /** The runner start config scale-up left for an instance (what its boot script would read). */
  async runnerConfig(instanceId: string): Promise<RunnerConfig> {
    const out = await this.c.ssm.send(new GetParameterCommand({ Name: this.config.parameters.runnerConfigRoot + instanceId, WithDecryption: true }));
    return decodeRunnerConfig(out.Parameter!.Value!);
  }
}
