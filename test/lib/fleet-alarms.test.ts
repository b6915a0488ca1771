import { EC2Client } from '@aws-sdk/client-ec2';
import { SQSClient } from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import { App, Duration, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import examples from '@octokit/webhooks-examples';
import { createHmac } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WarmRunners, WebhookExposure, type WarmRunnersProps } from '../../lib';
import { ALARMS_NOTIFY_NO_ONE } from '../../lib/fleet-alarms';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { createReconcileHandler } from '../../lambdas/reconcile/handler';
import { createScaleDownHandler } from '../../lambdas/scale-down/handler';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { createWebhookHandler } from '../../lambdas/webhook/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { LAMBDA_ENV, parseFleetConfig, Provider, ssmPaths, type FleetConfig } from '../../lambdas/shared/contract';
import { alarmFires, emfDatapoints, type Datapoint } from '../support/alarm-eval';
import { awsError, FakeAws } from '../support/fake-aws';
import { INSTANCE_ARN_PREFIX, jobEvent, job, Lines } from '../support/fixtures';
import { functionUrlEvent, githubHeaders } from '../webhook/support';

type Resource = { Properties: Record<string, unknown> };

const fleetProps = (vpc: ec2.IVpc, extra: Partial<WarmRunnersProps> = {}): WarmRunnersProps => ({
  vpc,
  github: { appId: '1', organization: 'org' },
  gitlab: { url: 'https://gitlab.example.com' },
  pools: [
    { name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), warm: { size: 1 } },
    { name: 'docker', provider: Provider.GITLAB, labels: ['docker'], machineImage: ec2.MachineImage.latestAmazonLinux2023() },
  ],
  ...extra,
});

function synth(extra: Partial<WarmRunnersProps> = {}) {
  const stack = new Stack(new App(), 'S');
  const runners = new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc'), extra));
  const template = Template.fromStack(stack);
  const alarm = (id: string): Record<string, unknown> => {
    const child = runners.node.tryFindChild(id) as cloudwatch.Alarm | undefined;
    if (!child) throw new Error(`no alarm ${id}`);
    const resource = template.findResources('AWS::CloudWatch::Alarm')[stack.getLogicalId(child.node.defaultChild as cloudwatch.CfnAlarm)] as Resource;
    return resource.Properties;
  };
  const nameOf = (fn: lambda.IFunction) => ({ Ref: stack.getLogicalId(fn.node.defaultChild as lambda.CfnFunction) });
  return { stack, runners, template, alarm, nameOf };
}

const fleet = synth();
/** The Lambdas' FleetConfig, as they parse it from the parameter. */
const config: FleetConfig = parseFleetConfig(JSON.stringify(fleet.runners.config));
const paths = ssmPaths(config.prefix);
const SECRET = 'the-right-secret';

describe('webhook refusals', () => {
  let aws: FakeAws;
  let lines: Lines;
  beforeEach(() => {
    aws = new FakeAws();
    lines = new Lines();
    aws.parameters.set(paths.github.webhookSecret, { value: SECRET, tags: {}, at: aws.now });
    aws.parameters.set(paths.gitlab.webhookToken, { value: SECRET, tags: {}, at: aws.now });
  });
  afterEach(() => aws.restore());

  const handler = () =>
    createWebhookHandler({
      ssm: new SSMClient({}),
      sqs: new SQSClient({}),
      metricSink: lines.sink,
      logger: { info: () => {}, warn: () => {}, error: () => {}, child() { return this; } },
      env: { [LAMBDA_ENV.fleetConfig]: JSON.stringify(config), [LAMBDA_ENV.jobsQueueUrl]: 'https://sqs.local/jobs.fifo' },
    });
  const body = JSON.stringify({ action: 'queued', workflow_job: { id: 1, labels: ['linux'] } });
  const refused = () => alarmFires(fleet.alarm('WebhookRefusedAlarm'), emfDatapoints(lines.lines));

  it('fire on a GitHub delivery signed with another secret', async () => {
    const res = (await handler()(functionUrlEvent('/github', githubHeaders(body, 'a-wrong-secret', 'workflow_job', 'd-1'), body))) as { statusCode: number };
    expect(res.statusCode).toBe(401);
    expect(refused()).toBe(true);
  });

  it('fire on a GitLab delivery with another token, and on one with none that names the Job Hook (a hook without its secret)', async () => {
    const gitlab = (headers: Record<string, string>) => handler()(functionUrlEvent('/gitlab', { 'X-Gitlab-Event': 'Job Hook', ...headers }, '{"object_kind":"build"}'));
    expect(((await gitlab({ 'X-Gitlab-Token': 'a-wrong-token' })) as { statusCode: number }).statusCode).toBe(401);
    expect(refused()).toBe(true);
    lines.lines.length = 0;
    expect(((await gitlab({})) as { statusCode: number }).statusCode).toBe(401);
    expect(refused()).toBe(true);
  });

  it('fire when no GitLab secret is configured on our side', async () => {
    aws.parameters.delete(paths.gitlab.webhookToken);
    await handler()(functionUrlEvent('/gitlab', { 'X-Gitlab-Event': 'Job Hook', 'X-Gitlab-Token': SECRET }, '{"object_kind":"build"}'));
    expect(refused()).toBe(true);
  });

  it('fire when the GitHub webhook secret is missing or empty on our side (a refusal, not a 500)', async () => {
    const signed = () => handler()(functionUrlEvent('/github', githubHeaders(body, SECRET, 'workflow_job', 'd-3'), body)) as Promise<{ statusCode: number }>;
    aws.parameters.delete(paths.github.webhookSecret);
    expect((await signed()).statusCode).toBe(401);
    expect(refused()).toBe(true);
    lines.lines.length = 0;
    aws.parameters.set(paths.github.webhookSecret, { value: '', tags: {}, at: aws.now });
    expect((await signed()).statusCode).toBe(401);
    expect(refused()).toBe(true);
  });

  it('do not fire when reading the GitHub secret fails for a while (throttled): a 5xx, redelivered later', async () => {
    aws.fault('GetParameter', awsError('ThrottlingException'));
    const res = (await handler()(functionUrlEvent('/github', githubHeaders(body, SECRET, 'workflow_job', 'd-4'), body))) as { statusCode: number };
    expect(res.statusCode).toBe(500);
    expect(refused()).toBe(false);
    expect(alarmFires(fleet.alarm('WebhookErrorAlarm'), emfDatapoints(lines.lines))).toBe(true);
  });

  it('fire on a GitHub delivery with X-GitHub-Event and no X-Hub-Signature-256 (an App whose secret was left empty)', async () => {
    const res = (await handler()(functionUrlEvent('/github', { 'Content-Type': 'application/json', 'X-GitHub-Event': 'workflow_job', 'X-GitHub-Delivery': 'd-5' }, body))) as { statusCode: number };
    expect(res.statusCode).toBe(401);
    expect(refused()).toBe(true);
  });

  it('do not fire on a request with neither a signature nor an event header (a scanner of the public URL), which counts apart', async () => {
    await handler()(functionUrlEvent('/github', { 'Content-Type': 'application/json' }, body));
    await handler()(functionUrlEvent('/gitlab', {}, '{}'));
    expect(refused()).toBe(false);
    expect(lines.metric(config.metrics.names.webhookUnsigned)).toBe(2);
  });

  it('do not fire on a delivery with the right signature', async () => {
    const headers = githubHeaders(body, SECRET, 'workflow_job', 'd-2');
    expect(createHmac('sha256', SECRET).update(body).digest('hex')).toBe(headers['X-Hub-Signature-256']!.slice('sha256='.length));
    await handler()(functionUrlEvent('/github', headers, body));
    expect(refused()).toBe(false);
  });
});

describe('function errors', () => {
  const lambdaErrors = (fn: lambda.IFunction, value: number, timestamp: number): Datapoint => ({ namespace: 'AWS/Lambda', name: 'Errors', dimensions: { FunctionName: fleet.nameOf(fn) }, value, timestamp });
  const watched = () => {
    const r = fleet.runners;
    return { Webhook: r.webhookFunction, ScaleUp: r.scaleUpFunction, Pool: r.poolFunction, ScaleDown: r.scaleDownFunction, Reconcile: r.reconcileFunction! };
  };

  it('each control-plane function has an alarm on its own Errors, by its function name', () => {
    for (const [id, fn] of Object.entries(watched())) {
      const props = fleet.alarm(`${id}ErrorAlarm`);
      // The webhook's adds its 5xx answers (WebhookFailed) to its Errors.
      const metric = id === 'Webhook' ? (props.Metrics as { MetricStat?: { Metric: Record<string, unknown>; Stat: string } }[]).find((m) => m.MetricStat?.Metric.Namespace === 'AWS/Lambda')!.MetricStat! : undefined;
      const found = metric ? { ...metric.Metric, Statistic: metric.Stat } : props;
      expect([id, found]).toEqual([id, expect.objectContaining({ Namespace: 'AWS/Lambda', MetricName: 'Errors', Statistic: 'Sum', Dimensions: [{ Name: 'FunctionName', Value: fleet.nameOf(fn) }] })]);
    }
  });

  it('the webhook alarm fires on its Lambda Errors alone, without any WebhookFailed', () => {
    expect(alarmFires(fleet.alarm('WebhookErrorAlarm'), [lambdaErrors(fleet.runners.webhookFunction, 1, 0)])).toBe(true);
    expect(alarmFires(fleet.alarm('WebhookErrorAlarm'), [lambdaErrors(fleet.runners.webhookFunction, 0, 0)])).toBe(false);
  });

  it('the scale-up alarm keeps its construct id (and so its history) and fires on one failed invocation', () => {
    const props = fleet.alarm('ScaleUpErrorAlarm');
    expect(props).toMatchObject({ Period: 300, EvaluationPeriods: 1, Threshold: 1 });
    expect(alarmFires(props, [lambdaErrors(fleet.runners.scaleUpFunction, 1, 0)])).toBe(true);
    // Another function's errors are not its.
    expect(alarmFires(props, [lambdaErrors(fleet.runners.poolFunction, 5, 0)])).toBe(false);
  });

  /**
   * A handler that cannot read its FleetConfig throws (so Lambda counts an error): each
   * invocation that threw is one `Errors` datapoint of its function, per run.
   */
  it('fire when the real handlers throw in consecutive runs (scheduled) or once (scale-up)', async () => {
    const aws = new FakeAws();
    try {
      const broken = async (): Promise<FleetConfig> => {
        throw new Error('AccessDeniedException: not authorized to perform ssm:GetParameter');
      };
      const caller = new AwsCaller({ sleep: async () => {}, timeoutMs: 200 });
      const runs: Record<string, () => Promise<unknown>> = {
        Pool: createPoolHandler({ ec2: new EC2Client({}), ssm: new SSMClient({}), aws: caller, loadConfig: broken }),
        ScaleDown: createScaleDownHandler({ ec2: new EC2Client({}), ssm: new SSMClient({}), aws: caller, loadConfig: broken, providers: () => ({}) }),
        Reconcile: () => createReconcileHandler({ sqs: new SQSClient({}), aws: caller, loadConfig: broken, providers: () => ({}), queueUrl: 'q' })(),
        ScaleUp: () =>
          createScaleUpHandler({ ec2: new EC2Client({}), ssm: new SSMClient({}), sqs: new SQSClient({}), aws: caller, loadConfig: broken, providers: () => ({}), queueUrl: 'q', deadLetterQueueUrl: 'd', instanceArnPrefix: INSTANCE_ARN_PREFIX })(jobEvent([job(1)])),
      };
      const fns = watched() as Record<string, lambda.IFunction>;
      for (const [id, run] of Object.entries(runs)) {
        const props = fleet.alarm(`${id}ErrorAlarm`);
        const period = (props.Period as number) * 1000;
        const points: Datapoint[] = [];
        for (const at of [0, period]) {
          const threw = await run().then(
            () => false,
            () => true,
          );
          if (threw) points.push(lambdaErrors(fns[id]!, 1, at));
        }
        expect([id, points.length]).toEqual([id, 2]);
        expect([id, alarmFires(props, points)]).toEqual([id, true]);
        // A scheduled function's one failed run is repaired by its next: no page.
        expect([id, alarmFires(props, points.slice(0, 1))]).toEqual([id, id === 'ScaleUp']);
      }
    } finally {
      aws.restore();
    }
  });

  it('fire on webhook throttles', () => {
    const props = fleet.alarm('WebhookThrottleAlarm');
    expect(props.Dimensions).toEqual([{ Name: 'FunctionName', Value: fleet.nameOf(fleet.runners.webhookFunction) }]);
    expect(alarmFires(props, [{ namespace: 'AWS/Lambda', name: 'Throttles', dimensions: { FunctionName: fleet.nameOf(fleet.runners.webhookFunction) }, value: 1, timestamp: 0 }])).toBe(true);
  });

  it('a scheduled function with a longer interval is judged over periods of its interval', () => {
    const slow = synth({ scaleDownInterval: Duration.minutes(15) });
    expect(slow.alarm('ScaleDownErrorAlarm')).toMatchObject({ Period: 900, EvaluationPeriods: 2 });
  });
});

describe('webhook failures', () => {
  let aws: FakeAws;
  let lines: Lines;
  beforeEach(() => {
    aws = new FakeAws();
    lines = new Lines();
    aws.parameters.set(paths.github.webhookSecret, { value: SECRET, tags: {}, at: aws.now });
  });
  afterEach(() => aws.restore());

  /** The webhook's environment as the template sets it, with the config inline or not at all. */
  const synthesizedEnv = (): Record<string, string> => {
    const fn = fleet.template.findResources('AWS::Lambda::Function')[fleet.stack.getLogicalId(fleet.runners.webhookFunction.node.defaultChild as lambda.CfnFunction)] as Resource;
    return (fn.Properties.Environment as { Variables: Record<string, string> }).Variables;
  };
  const handler = (env: Record<string, string>) =>
    createWebhookHandler({
      ssm: new SSMClient({}),
      sqs: new SQSClient({}),
      metricSink: lines.sink,
      logger: { info: () => {}, warn: () => {}, error: () => {}, child() { return this; } },
      env,
    });
  /** The community example of a queued job, moved to the fleet's organisation and its GitHub pool's labels. */
  const example = (examples.find((e) => e.name === 'workflow_job')!.examples as unknown as { action: string; workflow_job: Record<string, unknown>; repository: Record<string, unknown> }[]).find((e) => e.action === 'queued')!;
  const pool = config.pools.find((p) => p.provider === Provider.GITHUB)!;
  const body = JSON.stringify({
    ...example,
    workflow_job: { ...example.workflow_job, labels: ['self-hosted', ...pool.labels] },
    repository: { ...example.repository, full_name: 'org/repo', owner: { ...(example.repository.owner as object), login: 'org' } },
    organization: { login: 'org' },
  });
  const deliver = (env: Record<string, string>, id: string) => handler(env)(functionUrlEvent('/github', githubHeaders(body, SECRET, 'workflow_job', id), body)) as Promise<{ statusCode: number }>;
  const failing = () => alarmFires(fleet.alarm('WebhookErrorAlarm'), emfDatapoints(lines.lines));

  it('WebhookErrorAlarm fires when the webhook answers 5xx: the queue unreachable (namespace from the config)', async () => {
    aws.fault('SendMessage', awsError('ServiceUnavailable', 503), awsError('ServiceUnavailable', 503));
    const env = { [LAMBDA_ENV.fleetConfig]: JSON.stringify(config), [LAMBDA_ENV.jobsQueueUrl]: 'https://sqs.local/jobs.fifo' };
    const res = await deliver(env, 'd-f1');
    expect(res.statusCode).toBeGreaterThanOrEqual(500);
    expect(lines.metric(config.metrics.names.webhookFailed)).toBe(1);
    expect(failing()).toBe(true);
  });

  it('WebhookErrorAlarm fires when the config cannot be read (the namespace from the environment the construct sets)', async () => {
    const env = synthesizedEnv();
    expect(env[LAMBDA_ENV.metricNamespace]).toBe(config.metrics.namespace);
    // The config parameter is missing: the webhook cannot know the namespace from it.
    const res = await deliver({ [LAMBDA_ENV.fleetConfigParameter]: paths.fleetConfig, [LAMBDA_ENV.metricNamespace]: env[LAMBDA_ENV.metricNamespace]! }, 'd-f2');
    expect(res.statusCode).toBe(500);
    expect(failing()).toBe(true);
  });

  it('a delivery queued or answered 4xx publishes no WebhookFailed', async () => {
    const env = { [LAMBDA_ENV.fleetConfig]: JSON.stringify(config), [LAMBDA_ENV.jobsQueueUrl]: 'https://sqs.local/jobs.fifo' };
    expect((await deliver(env, 'd-f3')).statusCode).toBe(202);
    expect((await handler(env)(functionUrlEvent('/github', githubHeaders(body, 'wrong', 'workflow_job', 'd-f4'), body)) as { statusCode: number }).statusCode).toBe(401);
    expect(lines.metric(config.metrics.names.webhookFailed)).toBe(0);
    expect(failing()).toBe(false);
  });
});

describe('reconciler failures', () => {
  /** A GitHub that refuses every call: each run's steps fail, and the reconciler goes on (no Lambda error). */
  const refusingGitHub = {
    appRequest: async () => {
      throw new Error('GitHub 403: Resource not accessible by integration');
    },
    installationRequest: async () => {
      throw new Error('GitHub 403: Resource not accessible by integration');
    },
  };

  it('ReconcileFailuresAlarm fires on failed steps in 2 runs in a row, not on one; a clean run publishes 0', async () => {
    const aws = new FakeAws();
    try {
      const props = fleet.alarm('ReconcileFailuresAlarm');
      const period = (props.Period as number) * 1000;
      const run = async (providers: () => Record<string, unknown>, at: number): Promise<Datapoint[]> => {
        const lines = new Lines();
        await createReconcileHandler({ sqs: new SQSClient({}), aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }), loadConfig: async () => config, providers: providers as never, queueUrl: 'q', sink: lines.sink })();
        return emfDatapoints(lines.lines).map((p) => ({ ...p, timestamp: at }));
      };
      const first = await run(() => ({ github: refusingGitHub }), 0);
      const second = await run(() => ({ github: refusingGitHub }), period);
      expect(first.find((p) => p.name === config.metrics.names.reconcileErrors)?.value).toBeGreaterThan(0);
      expect(alarmFires(props, first)).toBe(false);
      expect(alarmFires(props, [...first, ...second])).toBe(true);
      const clean = await run(() => ({}), period);
      expect(clean.find((p) => p.name === config.metrics.names.reconcileErrors)?.value).toBe(0);
      expect(alarmFires(props, [...first, ...clean])).toBe(false);
    } finally {
      aws.restore();
    }
  });
});

describe('WebhookExposure.none()', () => {
  it('has no webhook alarms and no lost-delivery alarm (nothing reaches the webhook; every job is the reconciler\'s), and keeps the reconciler\'s', () => {
    const none = synth({ webhookExposure: WebhookExposure.none(), gitlab: { url: 'https://gitlab.example.com', reconcileProjectIds: [1] } });
    for (const id of ['WebhookRefusedAlarm', 'WebhookThrottleAlarm', 'WebhookErrorAlarm', 'LostDeliveriesAlarm']) expect([id, none.runners.node.tryFindChild(id)]).toEqual([id, undefined]);
    for (const id of ['ReconcileErrorAlarm', 'ReconcileFailuresAlarm', 'ScaleUpErrorAlarm']) expect(none.alarm(id)).toBeDefined();
    expect(none.runners.alarms.map((a) => a.node.id)).not.toContain('LostDeliveriesAlarm');
    // The default exposure has them.
    for (const id of ['WebhookRefusedAlarm', 'WebhookThrottleAlarm', 'WebhookErrorAlarm', 'LostDeliveriesAlarm']) expect(fleet.alarm(id)).toBeDefined();
  });
});

describe('alarm actions', () => {
  it('a fleet without alarmActions warns at synth that its alarms notify no one', () => {
    Annotations.fromStack(fleet.stack).hasWarning('/S/Runners', Match.stringLikeRegexp(`notify no one.*\\[ack: ${ALARMS_NOTIFY_NO_ONE}\\]`));
  });

  it('a fleet with alarmActions does not, and every new alarm gets them', () => {
    const stack = new Stack(new App(), 'S');
    const topic = new sns.Topic(stack, 'Topic');
    new WarmRunners(stack, 'Runners', fleetProps(new ec2.Vpc(stack, 'Vpc'), { alarmActions: [new actions.SnsAction(topic)] }));
    Annotations.fromStack(stack).hasNoWarning('*', Match.stringLikeRegexp('notify no one'));
    const alarms = Template.fromStack(stack).findResources('AWS::CloudWatch::Alarm');
    for (const id of ['WebhookRefusedAlarm', 'WebhookThrottleAlarm', 'WebhookErrorAlarm', 'LostDeliveriesAlarm', 'PoolErrorAlarm', 'ReconcileErrorAlarm', 'ReconcileFailuresAlarm']) {
      const found = Object.entries(alarms).find(([logical]) => logical.startsWith(`Runners${id}`));
      expect([id, (found?.[1] as Resource | undefined)?.Properties.AlarmActions]).toEqual([id, [{ Ref: stack.getLogicalId(topic.node.defaultChild as sns.CfnTopic) }]]);
    }
  });
});
