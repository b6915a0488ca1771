import { Annotations, Aspects, Aws, CfnOutput, Duration, Stack, Token } from 'aws-cdk-lib';
import type * as apigateway from 'aws-cdk-lib/aws-apigateway';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import {
  activationKeys,
  buildFleetConfig,
  bootLogGroupName,
  DEFAULT_PREFIX,
  fleetMetricNamespace,
  JOB_RETRY_DEFAULTS,
  LEDGER_STAGE_NAMES,
  LAMBDA_ENV,
  METRIC_DIMENSIONS,
  METRIC_NAMES,
  GITHUB_APPS_LOW_FRACTION,
  isScaleSetPool,
  needsWebhooks,
  Provider,
  RUNNER_PIN_WARN_DAYS,
  RUNNER_RELEASE_ALARM_HOURS,
  RUNNER_VERSION_LATEST,
  SCALE_UP_TIMEOUT_SECONDS,
  ssmPaths,
  tagKeys,
  type FleetConfig,
  type JobRetryOptions,
  type LedgerStage,
} from '../lambdas/shared/contract';
import { AlarmActions } from './alarm-actions';
import { BundledFunction, BundledHandler } from './bundled-function';
import { registerFleet } from './fleet-clash';
import { FunctionNetwork } from './function-network';
import { instanceCaCertificates, validatePrivateNetworkProps } from './private-network';
import { exposeWebhook, WebhookExposure, WebhookExposureKind } from './webhook-exposure';
import { fleetConfigInput } from './fleet-config-input';
import { FleetDrain } from './fleet-drain';
import { runOnceOnSchedule } from './scheduled-invoke';
import { FUNCTION_MEMORY_MB } from './function-memory';
import { acknowledgeWildcard, nagArn } from './nag';
import { JobQueue } from './job-queue';
import { JobRecords } from './job-records';
import { Reconciler } from './reconciler';
import { ScaleSetListener } from './scale-set-listener';
import { ScaleSetResource } from './scale-set-resource';
import { RunnerReleaseResolver } from './runner-release-resolver';
import { runnerVersionWarnings } from './runner-version';
import type { GitHubConnectionProps, GitLabConnectionProps, RunnerPoolProps } from './props';
import { RunnerFleet } from './runner-fleet';
import { ALARMS_NOTIFY_NO_ONE, fleetAlarm, functionErrorAlarms, lostDeliveriesAlarm, reconcileFailuresAlarm, webhookAlarms } from './fleet-alarms';
import { overlapWarnings } from './overlap-check';
import type { RunnerPool } from './runner-pool';
import { alarmActionWarnings, hostedLabelWarnings, prepareCommandWarnings, reuseWithoutWarmPoolWarnings, validateWarmRunnersProps } from './validate';

/**
 * Props of the `WarmRunners` construct. The jobs queue is FIFO (it de-duplicates webhook
 * deliveries), and Lambda offers no batching window for FIFO event sources, so scale-up
 * is shaped by batch size and maximum concurrency alone.
 */
export interface WarmRunnersProps {
  /** VPC the runner instances run in. */
  readonly vpc: ec2.IVpc;
  /**
   * Subnets the runner instances launch in (a pool's own `vpcSubnets` takes precedence).
   * @default - the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * GitHub connection (a GitHub App).
   * @default - no GitHub pools
   */
  readonly github?: GitHubConnectionProps;
  /**
   * GitLab connection.
   * @default - no GitLab pools
   */
  readonly gitlab?: GitLabConnectionProps;
  /** The runner pools; at least one. */
  readonly pools: RunnerPoolProps[];
  /**
   * Prefix of every SSM path and tag key of this fleet; two fleets in one account need two prefixes.
   * @default 'warm-runners'
   */
  readonly prefix?: string;
  /**
   * KMS key for the runner config parameters (SecureString).
   * @default - the AWS managed key alias/aws/ssm
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * Root device name of the pools' AMIs, for the pools that set none and whose image does not
   * tell it (`RunnerPoolProps.rootDeviceName`).
   * @default '/dev/xvda' (Amazon Linux; Ubuntu uses '/dev/sda1')
   * @deprecated set `rootDeviceName` on the pool (or let its image decide): a fleet may mix
   * Amazon Linux and Ubuntu pools
   */
  readonly rootDeviceName?: string;
  /**
   * Jobs scale-up takes per invocation; activations in one invocation share their API calls.
   * @default 10 (the most a FIFO queue allows)
   */
  readonly scaleUpBatchSize?: number;
  /**
   * Most concurrent scale-up invocations.
   * @default 5
   */
  readonly scaleUpMaxConcurrency?: number;
  /**
   * How often the pool Lambda tops up and evicts.
   * @default Duration.minutes(1)
   */
  readonly poolInterval?: Duration;
  /**
   * How often the scale-down Lambda reclaims finished, idle, stuck and orphaned resources.
   * @default Duration.minutes(5)
   */
  readonly scaleDownInterval?: Duration;
  /**
   * How often the reconciler asks GitHub and GitLab for failed deliveries and waiting jobs the
   * webhook missed.
   * @default Duration.minutes(5)
   */
  readonly reconcileInterval?: Duration;
  /**
   * Failed webhook deliveries the reconciler redelivers per run at most (one GitHub request
   * each); for GitLab, failed hook events resent per run, at most 5 (GitLab's resend rate limit).
   * @default 10
   */
  readonly redeliverLimit?: number;
  /**
   * Job lists of queued or in-progress workflow runs the reconciler reads per run at most (one
   * GitHub request each); docs/control-plane.md gives the whole budget per run.
   * @default 100
   */
  readonly reconcileRunReadLimit?: number;
  /**
   * Repositories whose queued and in-progress runs the reconciler reads per run at most (two
   * GitHub requests each), and GitLab projects whose pending jobs it lists (one request each).
   * Consecutive runs read consecutive windows, so every repository is read within
   * ceil(repositories / this) runs; docs/control-plane.md gives the budget.
   * @default 50
   */
  readonly reconcileRepositoriesPerRun?: number;
  /**
   * How long after a job's runner was started scale-up looks at the job again: if it is still
   * queued and no runner of its pool is idle or starting (the runner took another job, or died
   * before taking any), the job gets another runner. Shorter retries sooner but may start a
   * runner for a job whose own runner is only slow to boot (the idle rule reclaims it).
   * @default Duration.minutes(5)
   */
  readonly jobRetryAfter?: Duration;
  /**
   * How many more runners a job whose runner went elsewhere may get; after the last, a job
   * still queued goes to the dead-letter queue with the reason `retries-exhausted`. 0 turns
   * retries off (the job is dead-lettered at its first check instead).
   * @default 2
   */
  readonly jobRetryLimit?: number;
  /**
   * Retention of every log group the fleet creates.
   * @default logs.RetentionDays.ONE_MONTH
   */
  readonly logRetention?: logs.RetentionDays;
  /**
   * CloudWatch namespace of the fleet's metrics. Each fleet in an account needs its own, or
   * the fleets' alarms watch each other's metrics; the default follows the prefix. A second
   * fleet of the same app, account and region with the same namespace (or prefix) is refused
   * at synth; fleets of separate apps cannot be checked: keep their prefixes apart.
   * @default - `CdkWarmRunners/<prefix>`
   */
  readonly metricNamespace?: string;
  /**
   * Actions of every alarm the fleet creates, for example
   * `[new cloudwatch_actions.SnsAction(topic)]` (aws-cdk-lib/aws-cloudwatch-actions).
   * @default - none: the alarms change state in CloudWatch and notify no one
   */
  readonly alarmActions?: cloudwatch.IAlarmAction[];
  /**
   * Reserved concurrency of the webhook function. Its Function URL is public: a reservation caps
   * what a flood of deliveries can take from the account's concurrency, so scale-up, pool and
   * scale-down keep running. Unset by default because Lambda refuses a reservation that leaves
   * less than 100 unreserved, which fails the deployment in accounts with a low concurrency
   * limit (new accounts); docs/operations.md, "Webhook reserved concurrency", gives a value.
   * @default - unreserved (the webhook shares the account's unreserved concurrency)
   */
  readonly webhookReservedConcurrency?: number;
  /**
   * Subnets of `vpc` the control-plane functions run in (webhook, scale-up, pool, scale-down,
   * reconciler, release resolver, drain), for a GitHub Enterprise Server or GitLab reachable
   * only inside the VPC. They then reach AWS through the VPC: a NAT or the VPC endpoints
   * docs/private-network.md lists.
   * @default - the functions run outside any VPC
   */
  readonly functionSubnets?: ec2.SubnetSelection;
  /**
   * Security groups of the control-plane functions; only with `functionSubnets`. Allow them to
   * the CI server with `ciServer.connections.allowFrom(fleet.functionConnections, ec2.Port.tcp(443))`.
   * @default - one security group with egress only
   */
  readonly functionSecurityGroups?: ec2.ISecurityGroup[];
  /**
   * Extra CA certificates (PEM text, one or more `-----BEGIN CERTIFICATE-----` blocks each) that
   * the control-plane functions and the runner instances trust, for a CI server whose
   * certificate a private CA signed. The functions get them as a layer named by
   * `NODE_EXTRA_CA_CERTS`; the instances install them into the OS trust store at boot, from an
   * SSM String parameter (docs/private-network.md).
   * @default - the public roots only
   */
  readonly caCertificates?: string[];
  /**
   * How GitHub and GitLab reach the webhook: a public Function URL, an API Gateway REST API
   * that admits listed source ranges only, or no endpoint (the reconciler alone finds jobs).
   * @default WebhookExposure.functionUrl()
   */
  readonly webhookExposure?: WebhookExposure;
}

/**
 * A self-hosted CI runner fleet on EC2 for GitHub Actions and GitLab CI whose jobs land on
 * a warm pool of parked instances: webhook, jobs queue, scale-up, pool and scale-down
 * Lambdas, the runners' launch templates and role, alarms and a dashboard.
 */
export class WarmRunners extends Construct implements ec2.IConnectable, iam.IGrantable {
  /** The runner instances' role, security group, launch templates and log group. */
  readonly fleet: RunnerFleet;
  /** The jobs queue and its dead-letter queue. */
  readonly jobs: JobQueue;
  /** The FleetConfig the Lambdas read, as built from the props. */
  readonly config: FleetConfig;
  /** The SSM String parameter the Lambdas read the FleetConfig from. */
  readonly configParameter: ssm.StringParameter;
  /** Verifies and queues webhook deliveries (Function URL, paths /github and /gitlab). */
  readonly webhookFunction: BundledFunction;
  /** Serves queued jobs (SQS event source of the jobs queue). */
  readonly scaleUpFunction: BundledFunction;
  /** Keeps the warm pools at their targets (scheduled). */
  readonly poolFunction: BundledFunction;
  /** Reclaims finished, idle, stuck and orphaned resources (scheduled). */
  readonly scaleDownFunction: BundledFunction;
  /** Redelivers failed deliveries and queues missed jobs (scheduled). */
  readonly reconcileFunction?: BundledFunction;
  /** The reconciler's schedule rule. A drain disables it. */
  readonly reconcileSchedule?: events.Rule;
  /**
   * Resolves the newest runner release of each provider a pool follows, and watches GitHub's
   * 30-day runner window (scheduled, hourly); absent when no pool follows a release and none serves GitHub.
   */
  readonly runnerReleaseFunction?: BundledFunction;
  /**
   * Long-polls the runner scale sets and asks scale-up for their runners (scheduled every
   * minute); absent when no pool is a scale set (`RunnerPoolProps.scaleSetName`).
   */
  readonly scaleSetListenerFunction?: BundledFunction;
  /** The per-job records scale-up checks before registering a runner. */
  readonly jobRecords: JobRecords;
  /**
   * The webhook's Function URL (`WebhookExposure.functionUrl()`, the default); append "github" or "gitlab".
   * Throws for any other exposure.
   * @deprecated use `webhookEndpoint`, the base URL whatever the exposure
   */
  get webhookUrl(): lambda.FunctionUrl {
    if (!this.functionUrl) throw new Error('webhookUrl exists only with WebhookExposure.functionUrl(): use webhookEndpoint');
    return this.functionUrl;
  }
  /** The webhook's base URL, ending in "/", whatever the exposure; append "github" or "gitlab". Absent for `WebhookExposure.none()`. */
  readonly webhookEndpoint?: string;
  /** The webhook's REST API (`WebhookExposure.apiGateway()`). */
  readonly webhookApi?: apigateway.RestApi;
  /** The control-plane functions' security groups, when they run in the VPC (`functionSubnets`). */
  readonly functionConnections?: ec2.Connections;
  /** The String parameter the instances read the extra CA certificates from (`caCertificates`). */
  readonly caCertificatesParameter?: ssm.StringParameter;
  /** The fleet's dashboard. */
  readonly dashboard: cloudwatch.Dashboard;
  /** The Function URL behind `webhookUrl`, with `WebhookExposure.functionUrl()` only. */
  private readonly functionUrl?: lambda.FunctionUrl;
  /** CloudWatch namespace of the fleet's metrics (the Lambdas', the instance log metric filter's). */
  readonly metricNamespace: string;
  /**
   * The fleet's alarms: dead-letter queue, failed jobs, each control-plane function's errors
   * (the webhook's with its 5xx answers), the reconciler's failed steps, webhook refusals and
   * throttles, lost deliveries (these and the webhook's not with `WebhookExposure.none()`),
   * parked below target, prime back-off, the runner release, and every GitHub App nearly out of
   * its rate limit (docs/operations.md, "Alarms").
   */
  readonly alarms: cloudwatch.Alarm[] = [];
  /**
   * The fleet's shared security group, which every pool without its own `securityGroups` has
   * (a pool with its own: `pool(name).connections`).
   */
  readonly connections: ec2.Connections;
  /**
   * The fleet's shared instance role, which every pool without its own `instanceRole` has: a
   * grant to the fleet reaches those pools only (a pool with its own role: `pool(name)`).
   */
  readonly grantPrincipal: iam.IPrincipal;
  /** Names of the SecureString parameters the operator fills in after deploying. */
  readonly secretParameterNames: string[];
  /** Drains the fleet when it is deleted; CloudFormation deletes it before every other part. */
  readonly drain: FleetDrain;

  constructor(scope: Construct, id: string, props: WarmRunnersProps) {
    super(scope, id);
    validateWarmRunnersProps(props);
    validatePrivateNetworkProps(props);
    for (const warning of hostedLabelWarnings(props)) Annotations.of(this).addWarningV2('cdk-warm-runners:github-hosted-label', warning);
    for (const warning of reuseWithoutWarmPoolWarnings(props)) Annotations.of(this).addWarningV2('cdk-warm-runners:reuse-without-warm-pool', warning);
    for (const { id: warningId, message } of prepareCommandWarnings(props)) Annotations.of(this).addWarningV2(warningId, message);
    for (const warning of runnerVersionWarnings(props.pools)) Annotations.of(this).addWarningV2('cdk-warm-runners:runner-version-baked', warning);
    for (const warning of alarmActionWarnings(props)) Annotations.of(this).addWarningV2(ALARMS_NOTIFY_NO_ONE, warning);
    const prefix = props.prefix ?? DEFAULT_PREFIX;
    const paths = ssmPaths(prefix);
    const tags = tagKeys(prefix);
    const stack = Stack.of(this);
    const logRetention = props.logRetention ?? logs.RetentionDays.ONE_MONTH;
    const namespace = props.metricNamespace ?? fleetMetricNamespace(prefix);
    this.metricNamespace = namespace;
    registerFleet({ construct: this, prefix, metricNamespace: namespace });
    // Every alarm in this construct's tree gets the actions, however and whenever it is added.
    if (props.alarmActions && props.alarmActions.length > 0) Aspects.of(this).add(new AlarmActions(props.alarmActions));
    // Before any function: each BundledFunction under this construct takes its VPC and CA layer.
    const network = new FunctionNetwork(this, 'Functions', {
      ...(props.functionSubnets ? { vpc: props.vpc, vpcSubnets: props.functionSubnets } : {}),
      ...(props.functionSecurityGroups ? { securityGroups: props.functionSecurityGroups } : {}),
      ...(props.caCertificates ? { caCertificates: props.caCertificates } : {}),
    });
    if (network.connections) this.functionConnections = network.connections;
    const instanceCas = props.caCertificates ? instanceCaCertificates(this, prefix, props.caCertificates) : undefined;

    this.fleet = new RunnerFleet(this, 'Fleet', {
      vpc: props.vpc,
      pools: props.pools,
      ...(props.vpcSubnets ? { vpcSubnets: props.vpcSubnets } : {}),
      prefix,
      metricNamespace: namespace,
      logRetention,
      ...(props.encryptionKey ? { encryptionKey: props.encryptionKey } : {}),
      ...(props.rootDeviceName ? { rootDeviceName: props.rootDeviceName } : {}),
      ...(instanceCas ? { caCertificatesSha256: instanceCas.sha256 } : {}),
    });
    this.connections = this.fleet.connections;
    // Every pool's role reads it through its instance grants (ReadFleetCaCertificates).
    if (instanceCas) this.caCertificatesParameter = instanceCas.parameter;
    this.grantPrincipal = this.fleet.grantPrincipal;

    // Each pool launches in its own subnets (RunnerPoolProps.vpcSubnets, else the fleet's).
    const subnetIds = [...new Set(this.fleet.pools.flatMap((p) => p.subnetIds))];
    this.config = buildFleetConfig(
      fleetConfigInput({ ...props, prefix, metricNamespace: namespace, ...(props.encryptionKey ? { parameterKeyId: props.encryptionKey.keyArn } : {}) }, (pool) => {
        const { launchTemplate: template, subnetIds: poolSubnets } = this.fleet.pool(pool.name);
        return { launchTemplateId: template.launchTemplateId!, launchTemplateVersion: template.latestVersionNumber, subnetIds: poolSubnets };
      }),
    );
    for (const { id: warningId, message } of overlapWarnings(this.config)) Annotations.of(this).addWarningV2(warningId, message);
    const configJson = JSON.stringify(this.config);
    const configLength = estimatedLength(configJson);
    if (configLength > 8192) {
      throw new Error(
        `the fleet configuration is about ${configLength} characters, above the 8 KB an SSM parameter holds: use fewer pools, subnets or labels per fleet, or split the pools into two fleets with different prefixes`,
      );
    }
    this.configParameter = new ssm.StringParameter(this, 'FleetConfig', {
      parameterName: paths.fleetConfig,
      description: `FleetConfig of ${prefix}, read by its Lambdas`,
      stringValue: configJson,
      // Standard parameters hold 4 KB; a fleet of many pools needs the advanced tier (8 KB).
      tier: configLength > 4096 ? ssm.ParameterTier.ADVANCED : ssm.ParameterTier.STANDARD,
    });

    this.jobs = new JobQueue(this, 'Jobs');
    const environment = { [LAMBDA_ENV.fleetConfigParameter]: paths.fleetConfig, [LAMBDA_ENV.jobsQueueUrl]: this.jobs.queue.queueUrl };
    // Scale-up tags each config parameter with its instance's ARN (the instance role's condition).
    const instanceArnPrefix = `arn:${Aws.PARTITION}:ec2:${Aws.REGION}:${Aws.ACCOUNT_ID}:instance/`;

    this.webhookFunction = new BundledFunction(this, 'Webhook', {
      handler: BundledHandler.WEBHOOK,
      description: 'Verifies GitHub and GitLab webhook deliveries and queues the jobs',
      // The handler answers within its own deadline (below the ~10 s GitHub and GitLab wait);
      // the function's timeout leaves room for a cold start on top.
      timeout: Duration.seconds(15),
      memorySize: FUNCTION_MEMORY_MB.webhook,
      ...(props.webhookReservedConcurrency === undefined ? {} : { reservedConcurrentExecutions: props.webhookReservedConcurrency }),
      // The dead-letter queue keeps a summary of a job whose message is too large to queue.
      // The namespace also for a 5xx answer given before the fleet config could be read (WebhookFailed).
      environment: { ...environment, [LAMBDA_ENV.deadLetterQueueUrl]: this.jobs.deadLetterQueue.queueUrl, [LAMBDA_ENV.metricNamespace]: namespace },
      logRetention,
    });
    // A fleet whose pools are all scale sets takes no webhook deliveries: no endpoint (the
    // function stays, unreachable, so the construct's shape and its users' references hold).
    const webhooks = needsWebhooks(this.config.pools);
    if (!webhooks && props.webhookExposure && props.webhookExposure.kind !== WebhookExposureKind.NONE) {
      Annotations.of(this).addWarningV2(
        'cdk-warm-runners:webhook-exposure-unused',
        'webhookExposure is set, but every pool is a runner scale set (scaleSetName): no job comes by webhook, so the fleet creates no endpoint; remove webhookExposure (docs/scale-set.md).',
      );
    }
    const exposure = webhooks ? (props.webhookExposure ?? WebhookExposure.functionUrl()) : WebhookExposure.none();
    const exposed = exposeWebhook(this, this.webhookFunction, exposure, logRetention);
    if (exposed.functionUrl) this.functionUrl = exposed.functionUrl;
    if (exposed.api) this.webhookApi = exposed.api;
    if (exposed.endpoint) this.webhookEndpoint = exposed.endpoint;
    this.jobRecords = new JobRecords(this, 'JobRecords');
    this.scaleUpFunction = new BundledFunction(this, 'ScaleUp', {
      handler: BundledHandler.SCALE_UP,
      description: 'Serves queued jobs: activates parked instances, else launches cold ones',
      // The scale-set listener waits on a demand's invocation longer than this (contract scale-set.ts).
      timeout: Duration.seconds(SCALE_UP_TIMEOUT_SECONDS),
      memorySize: FUNCTION_MEMORY_MB['scale-up'],
      environment: {
        ...environment,
        [LAMBDA_ENV.deadLetterQueueUrl]: this.jobs.deadLetterQueue.queueUrl,
        [LAMBDA_ENV.instanceArnPrefix]: instanceArnPrefix,
        [LAMBDA_ENV.jobRecordTable]: this.jobRecords.table.tableName,
        [LAMBDA_ENV.jobRetryOptions]: JSON.stringify(jobRetryOptionsOf(props)),
      },
      logRetention,
    });
    this.poolFunction = new BundledFunction(this, 'Pool', {
      handler: BundledHandler.POOL,
      description: 'Keeps each warm pool at its target and evicts stale instances',
      timeout: Duration.seconds(120),
      memorySize: FUNCTION_MEMORY_MB.pool,
      environment: { ...environment, [LAMBDA_ENV.jobRecordTable]: this.jobRecords.table.tableName },
      logRetention,
    });
    this.scaleDownFunction = new BundledFunction(this, 'ScaleDown', {
      handler: BundledHandler.SCALE_DOWN,
      description: 'Reclaims finished, idle, stuck and orphaned runners, parameters and registrations',
      timeout: Duration.seconds(120),
      memorySize: FUNCTION_MEMORY_MB['scale-down'],
      environment,
      logRetention,
    });
    const secrets = secretParameters(props, paths);
    const parameterArn = (name: string) => stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: name.slice(1) });
    // The reconciler finds what webhooks missed; scale-set jobs come from GitHub's assignment.
    if ((props.github || props.gitlab) && webhooks) {
      const reconciler = new Reconciler(this, 'Reconcile', {
        environment,
        queue: this.jobs.queue,
        ...(props.github ? { appPrivateKeyArn: parameterArn(paths.github.appPrivateKey) } : {}),
        ...(secrets.additionalAppKeys.length > 0 ? { additionalAppPrivateKeyArns: secrets.additionalAppKeys.map(parameterArn) } : {}),
        ...(props.gitlab ? { gitlabTokenArn: parameterArn(paths.gitlab.token) } : {}),
        logRetention,
        prefix,
        ...(props.reconcileInterval ? { interval: props.reconcileInterval } : {}),
        ...(props.redeliverLimit === undefined ? {} : { redeliverLimit: props.redeliverLimit }),
        ...(props.reconcileRunReadLimit === undefined ? {} : { runReadLimit: props.reconcileRunReadLimit }),
        ...(props.reconcileRepositoriesPerRun === undefined ? {} : { repositoriesPerRun: props.reconcileRepositoriesPerRun }),
      });
      this.reconcileFunction = reconciler.function;
      this.reconcileSchedule = reconciler.schedule;
    }
    // Runner updates: the release parameters of the providers a pool follows (the resolver
    // writes them; the pool and the instances read them), and the resolver, also for a fleet
    // of GitHub pins alone (it publishes their days left).
    const followed = [...new Set(this.config.pools.filter((p) => p.runnerVersion === RUNNER_VERSION_LATEST).map((p) => p.provider))];
    const releaseArns = followed.map((provider) => parameterArn(paths.runnerRelease(provider)));
    if (followed.length > 0 || this.config.pools.some((p) => p.provider === Provider.GITHUB)) {
      const resolver = new RunnerReleaseResolver(this, 'RunnerRelease', { environment, releaseParameterArns: releaseArns, logRetention, prefix });
      this.runnerReleaseFunction = resolver.function;
    }
    if (releaseArns.length > 0) this.poolFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameter'], resources: releaseArns }));
    const all = [
      this.webhookFunction,
      this.scaleUpFunction,
      this.poolFunction,
      this.scaleDownFunction,
      ...(this.reconcileFunction ? [this.reconcileFunction] : []),
      ...(this.runnerReleaseFunction ? [this.runnerReleaseFunction] : []),
    ];
    for (const fn of all) this.configParameter.grantRead(fn);

    if (this.config.pools.some(isScaleSetPool)) {
      const appKeyArns = [paths.github.appPrivateKey, ...secrets.additionalAppKeys].map(parameterArn);
      const shared = { prefix, environment: { [LAMBDA_ENV.fleetConfigParameter]: paths.fleetConfig }, configParameter: this.configParameter, appPrivateKeyArns: appKeyArns, logRetention, ...(props.encryptionKey ? { encryptionKey: props.encryptionKey } : {}) };
      const listener = new ScaleSetListener(this, 'ScaleSetListener', { ...shared, jobRecords: this.jobRecords, scaleUpFunction: this.scaleUpFunction });
      this.scaleSetListenerFunction = listener.function;
      // Created before the drain, which depends on every part of the fleet: CloudFormation
      // deletes the drain (every runner gone, the listener's schedule disabled) before it
      // deletes the scale sets. The listener's schedule starts once the scale sets exist.
      const scaleSets = new ScaleSetResource(this, 'ScaleSets', { ...shared, config: this.config, jobRecords: this.jobRecords });
      listener.schedule.node.addDependency(scaleSets.resource);
    }

    // Triggers.
    this.scaleUpFunction.addEventSource(
      new SqsEventSource(this.jobs.queue, {
        batchSize: props.scaleUpBatchSize ?? 10,
        maxConcurrency: props.scaleUpMaxConcurrency ?? 5,
        reportBatchItemFailures: true,
      }),
    );
    for (const fn of [this.poolFunction, this.scaleDownFunction]) runOnceOnSchedule(fn);
    new events.Rule(this, 'PoolSchedule', {
      description: `Runs the pool Lambda of ${prefix}`,
      schedule: events.Schedule.rate(props.poolInterval ?? Duration.minutes(1)),
      targets: [new targets.LambdaFunction(this.poolFunction, { retryAttempts: 0 })],
    });
    new events.Rule(this, 'ScaleDownSchedule', {
      description: `Runs the scale-down Lambda of ${prefix}`,
      schedule: events.Schedule.rate(props.scaleDownInterval ?? Duration.minutes(5)),
      targets: [new targets.LambdaFunction(this.scaleDownFunction, { retryAttempts: 0 })],
    });

    // Permissions, each function only what it calls.
    this.jobs.queue.grantSendMessages(this.webhookFunction);
    this.jobs.deadLetterQueue.grantSendMessages(this.webhookFunction); // records jobs too large to queue
    this.jobs.queue.grantSendMessages(this.scaleUpFunction); // re-queues jobs that wait for capacity
    this.jobs.deadLetterQueue.grantSendMessages(this.scaleUpFunction); // parks malformed messages

    this.jobRecords.grantClaim(this.scaleUpFunction); // launch tickets too (the same three actions)
    this.jobRecords.grantLaunchTickets(this.poolFunction);
    const readSecrets = (fn: lambda.IFunction, names: string[]) => {
      if (names.length === 0) return;
      fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameter'], resources: names.map(parameterArn) }));
    };
    readSecrets(this.webhookFunction, [...secrets.webhook, ...secrets.gitlabApi]);
    for (const fn of [this.scaleUpFunction, this.scaleDownFunction]) readSecrets(fn, [...secrets.githubApi, ...secrets.gitlabApi]);
    this.secretParameterNames = [...new Set([...secrets.webhook, ...secrets.githubApi, ...secrets.gitlabApi])];

    const runnerConfigArn = parameterArn(`${paths.runnerConfigRoot}*`);
    const fleetInstances = stack.formatArn({ service: 'ec2', resource: 'instance', resourceName: '*' });
    const ownedByFleet = { Null: { [`aws:ResourceTag/${tags.pool}`]: 'false' } };
    const launchTemplateArns = this.fleet.launchTemplates.map(({ launchTemplate }) =>
      stack.formatArn({ service: 'ec2', resource: 'launch-template', resourceName: launchTemplate.launchTemplateId! }),
    );
    const poolNames = this.config.pools.map((p) => p.name);
    const anySpot = this.config.pools.some((p) => p.spot);
    const arnOf = (resource: string, resourceName: string, account?: string) =>
      stack.formatArn({ service: 'ec2', resource, resourceName, ...(account === undefined ? {} : { account }) });
    // Tags at creation (ec2:CreateAction) only carrying one of this fleet's pools: every launch
    // tags its instance (and the pool's, its volume) with the pool.
    const launchedWithPoolTag = { StringEquals: { [`aws:RequestTag/${tags.pool}`]: poolNames } };
    // Each launch path, per resource type of the Service Authorization Reference (test/lib/iam-launch.test.ts
    // judges every part against the reference's condition keys):
    // - RunInstances carries `ec2:LaunchTemplate` on every resource type it touches but the spot
    //   request, so one statement keeps it to this fleet's templates. An instant CreateFleet has
    //   no service-linked role and launches with the caller's RunInstances too.
    // - CreateFleet carries no `ec2:LaunchTemplate` at all: its parts are scoped each by what
    //   the reference lets a policy see (the instance's pool tag, the subnets' and templates'
    //   ARNs); the fleet resource and the volume by type (the call tags instances only; the
    //   volume's tags are the launch template's, the pool tag among them, lib/runner-fleet.ts),
    //   the image by type (any image of the region, as published CreateFleet policies grant it).
    const launch = (fn: lambda.IFunction, actions: ('ec2:CreateFleet' | 'ec2:RunInstances')[]) => {
      fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['ec2:RunInstances'], resources: ['*'], conditions: { ArnLike: { 'ec2:LaunchTemplate': launchTemplateArns } } }));
      if (anySpot) {
        // The spot request is created with the instance the statement above allows; its row
        // lists no launch template key and the launches do not tag it.
        fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['ec2:RunInstances'], resources: [arnOf('spot-instances-request', '*')] }));
      }
      fn.addToRolePolicy(new iam.PolicyStatement({ actions, resources: launchTemplateArns }));
      if (actions.includes('ec2:CreateFleet')) {
        fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['ec2:CreateFleet'], resources: [fleetInstances], conditions: launchedWithPoolTag }));
        fn.addToRolePolicy(
          new iam.PolicyStatement({
            actions: ['ec2:CreateFleet'],
            resources: [arnOf('fleet', '*'), arnOf('volume', '*'), arnOf('image', '*', ''), ...subnetIds.map((id) => arnOf('subnet', id))],
          }),
        );
      }
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['ec2:CreateTags'],
          resources: [fleetInstances, arnOf('volume', '*')],
          conditions: { StringEquals: { 'ec2:CreateAction': actions.map((a) => a.replace('ec2:', '')), ...launchedWithPoolTag.StringEquals } },
        }),
      );
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['iam:PassRole'],
          // Exactly the roles the pools' instance profiles hold (the shared one only while a pool uses it).
          resources: [...new Set(this.fleet.pools.map((p) => p.role.roleArn))],
          conditions: { StringEquals: { 'iam:PassedToService': 'ec2.amazonaws.com' } },
        }),
      );
    };
    const describe = new iam.PolicyStatement({
      // Describe calls take no resource-level permissions.
      actions: ['ec2:DescribeInstances'],
      resources: ['*'],
    });

    launch(this.scaleUpFunction, ['ec2:CreateFleet', 'ec2:RunInstances']);
    this.scaleUpFunction.addToRolePolicy(describe);
    this.scaleUpFunction.addToRolePolicy(
      // TerminateInstances: a cold instance whose config could not be written is not left running.
      new iam.PolicyStatement({ actions: ['ec2:StartInstances', 'ec2:TerminateInstances'], resources: [fleetInstances], conditions: ownedByFleet }),
    );
    // Only the keys an activation writes (and the runner id of a cold launch) and its rollback
    // removes (never the affinity, lambdas/scale-up/claim.ts). The Null check matters for
    // DeleteTags: without tag keys it deletes every tag, the pool tag too, and then no function
    // could terminate the instance; ForAllValues holds for an empty set.
    const scaleUpTags = (action: string, keys: string[]) =>
      new iam.PolicyStatement({
        actions: [action],
        resources: [fleetInstances],
        conditions: { Null: { ...ownedByFleet.Null, 'aws:TagKeys': 'false' }, 'ForAllValues:StringEquals': { 'aws:TagKeys': keys } },
      });
    this.scaleUpFunction.addToRolePolicy(scaleUpTags('ec2:CreateTags', [...activationKeys(tags), tags.affinity]));
    this.scaleUpFunction.addToRolePolicy(scaleUpTags('ec2:DeleteTags', activationKeys(tags)));
    this.scaleUpFunction.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ssm:PutParameter', 'ssm:AddTagsToResource', 'ssm:DeleteParameter', 'ssm:GetParameter'],
        resources: [runnerConfigArn],
      }),
    );
    // The prime back-off holds cold launches too (lambdas/scale-up/cold-gate.ts): scale-up
    // reads each pool's state parameter, never writes it.
    this.scaleUpFunction.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['ssm:GetParameter'], resources: this.config.pools.map((p) => parameterArn(paths.primeState(p.name))) }),
    );
    // Spot launches need EC2's spot service-linked role, which EC2 creates on first use; the
    // pool may launch spot before scale-up ever does. Not the EC2 Fleet one: an instant fleet
    // does not use it (EC2 user guide, "EC2 Fleet prerequisites").
    for (const fn of anySpot ? [this.scaleUpFunction, this.poolFunction] : []) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['iam:CreateServiceLinkedRole'],
          resources: ['*'],
          conditions: { StringEquals: { 'iam:AWSServiceName': 'spot.amazonaws.com' } },
        }),
      );
    }

    launch(this.poolFunction, ['ec2:RunInstances']);
    this.poolFunction.addToRolePolicy(describe);
    this.poolFunction.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['ec2:TerminateInstances'], resources: [fleetInstances], conditions: ownedByFleet }),
    );
    // The eviction lock is a marker written where the instance's config would go, so an
    // eviction and a claim can never both win.
    this.poolFunction.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ssm:PutParameter', 'ssm:AddTagsToResource', 'ssm:DeleteParameter'],
        resources: [runnerConfigArn],
      }),
    );
    this.poolFunction.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['ssm:GetParametersByPath'], resources: [parameterArn(paths.runnerConfigRoot.replace(/\/$/, ''))] }),
    );
    // The prime-failure back-off: one state parameter per pool, and the reason on a failed standby.
    this.poolFunction.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['ssm:GetParameter', 'ssm:PutParameter'], resources: this.config.pools.map((p) => parameterArn(paths.primeState(p.name))) }),
    );
    this.poolFunction.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ec2:CreateTags'],
        resources: [fleetInstances],
        // ForAllValues holds for an absent set: the Null check makes the one key required.
        conditions: { Null: { ...ownedByFleet.Null, 'aws:TagKeys': 'false' }, 'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.primeFailure] } },
      }),
    );
    // Pools following an image parameter (RunnerImage): the pool reads its value to evict
    // standbys of an older image, and a launch through a template that holds `resolve:ssm:`
    // needs ssm:GetParameters on it for the caller (EC2 user guide, "Use a Systems Manager
    // parameter instead of an AMI ID"). Only those parameters.
    const imageParameters = [...new Set(this.config.pools.flatMap((p) => (p.imageParameter === undefined ? [] : [p.imageParameter])))];
    if (imageParameters.length > 0) {
      const imageArns = imageParameters.map((name) => stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: name.replace(/^\//, '') }));
      this.poolFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameter', 'ssm:GetParameters'], resources: imageArns }));
      this.scaleUpFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameters'], resources: imageArns }));
    }
    this.poolFunction.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ec2:CancelSpotInstanceRequests'],
        resources: [arnOf('spot-instances-request', '*')],
      }),
    );

    this.scaleDownFunction.addToRolePolicy(describe);
    // The scale-set listener's job events (lambdas/scale-set-listener/jobs.ts): a runner's job
    // started or completed, as the marks scale-down reads, on the fleet's instances only.
    this.scaleSetListenerFunction?.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ec2:CreateTags'],
        resources: [fleetInstances],
        conditions: {
          Null: { ...ownedByFleet.Null, 'aws:TagKeys': 'false' },
          // The scale-set pools' instances only: a webhook pool's runner is none of its business.
          StringEquals: { [`aws:ResourceTag/${tags.pool}`]: this.config.pools.filter(isScaleSetPool).map((p) => p.name) },
          'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.jobStarted, tags.idleSince] },
        },
      }),
    );
    this.scaleDownFunction.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['ec2:TerminateInstances'], resources: [fleetInstances], conditions: ownedByFleet }),
    );
    // The idle rule's first reading, kept on the instance until a second one confirms it. The
    // Null check matters for DeleteTags: without tag keys it deletes every tag, and ForAllValues
    // holds for an empty set.
    this.scaleDownFunction.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ec2:CreateTags', 'ec2:DeleteTags'],
        resources: [fleetInstances],
        conditions: {
          Null: { ...ownedByFleet.Null, 'aws:TagKeys': 'false' },
          'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.idleSince] },
        },
      }),
    );
    if (this.config.pools.some((p) => p.reuse)) {
      // Idle-stop (lambdas/scale-down/idle-stop.ts): its claim is a marker written where the
      // instance's config would go, never over one (the Deny keeps it a claim), and the
      // `parking` tag that keeps the sweeps away while the instance parks.
      this.scaleDownFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:PutParameter', 'ssm:AddTagsToResource'], resources: [runnerConfigArn] }));
      this.scaleDownFunction.addToRolePolicy(
        new iam.PolicyStatement({ effect: iam.Effect.DENY, actions: ['ssm:PutParameter'], resources: [runnerConfigArn], conditions: { StringEquals: { 'ssm:Overwrite': 'true' } } }),
      );
      this.scaleDownFunction.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['ec2:CreateTags'],
          resources: [fleetInstances],
          conditions: { Null: { ...ownedByFleet.Null, 'aws:TagKeys': 'false' }, 'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.parking] } },
        }),
      );
    }
    this.scaleDownFunction.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ssm:GetParametersByPath', 'ssm:DeleteParameters'],
        resources: [runnerConfigArn, parameterArn(paths.runnerConfigRoot.replace(/\/$/, ''))],
      }),
    );
    if (props.encryptionKey) {
      // Explicit actions instead of the grant helpers' wildcards (kms:ReEncrypt*, kms:GenerateDataKey*).
      // Scale-up writes the SecureString runner configs with the key and reads its claim back
      // decrypted: a standard parameter is encrypted under the key directly (kms:Encrypt), an
      // advanced one by envelope encryption (kms:GenerateDataKey; KMS developer guide, "How AWS
      // Systems Manager Parameter Store uses AWS KMS"). The put names no tier, so an account
      // whose default parameter tier is advanced makes it advanced: both stay. The pool writes
      // only String markers and reads nothing encrypted: no key; nor the release resolver (String
      // parameters, no secret). The others read the CI secrets, which may be encrypted with it.
      for (const fn of all.filter((f) => f !== this.poolFunction && f !== this.runnerReleaseFunction)) {
        fn.addToRolePolicy(
          new iam.PolicyStatement({
            actions: fn === this.scaleUpFunction ? ['kms:Encrypt', 'kms:GenerateDataKey', 'kms:Decrypt'] : ['kms:Decrypt'],
            resources: [props.encryptionKey.keyArn],
            conditions: { StringEquals: { 'kms:ViaService': `ssm.${Aws.REGION}.amazonaws.com` } },
          }),
        );
      }
    }

    const reasons = {
      any: 'Describe calls take no resource-level permissions; RunInstances spans resource types known only at launch (subnet, image, volume, interface) and is conditioned on this fleet\'s launch templates (ec2:LaunchTemplate); CreateServiceLinkedRole only for Spot.',
      launched:
        "CreateFleet carries no launch template key: its fleet, volumes and image exist only at launch (the image is the launch template's), and come only with an instance that must carry one of this fleet's pool tags (aws:RequestTag) from this fleet's launch templates; tags at creation (ec2:CreateAction) only with a pool tag.",
      instances: 'Only this fleet\'s instances: every statement on instance/* is conditioned on the fleet\'s pool tag; instance ids are known only at run time.',
      parameters: 'Only this fleet\'s runner config parameters, one per instance id known only at run time.',
      spot: 'Spot requests are created by launches at run time; their ids are not known at deploy time.',
    };
    for (const fn of [this.scaleUpFunction, this.poolFunction, this.scaleDownFunction]) {
      acknowledgeWildcard(fn.role!, '*', reasons.any);
      acknowledgeWildcard(fn.role!, nagArn('ec2', 'instance/*'), reasons.instances);
    }
    if (this.scaleSetListenerFunction) acknowledgeWildcard(this.scaleSetListenerFunction.role!, nagArn('ec2', 'instance/*'), reasons.instances);
    for (const fn of [this.scaleUpFunction, this.poolFunction, this.scaleDownFunction]) {
      acknowledgeWildcard(fn.role!, nagArn('ssm', `parameter${paths.runnerConfigRoot}*`), reasons.parameters);
    }
    for (const fn of [this.scaleUpFunction, this.poolFunction]) {
      acknowledgeWildcard(fn.role!, nagArn('ec2', 'volume/*'), reasons.launched);
      if (anySpot || fn === this.poolFunction) acknowledgeWildcard(fn.role!, nagArn('ec2', 'spot-instances-request/*'), reasons.spot);
    }
    acknowledgeWildcard(this.scaleUpFunction.role!, nagArn('ec2', 'fleet/*'), 'CreateFleet creates the fleet resource itself: its id does not exist before the call.');
    acknowledgeWildcard(this.scaleUpFunction.role!, 'arn:<AWS::Partition>:ec2:<AWS::Region>::image/*', reasons.launched);

    // Alarms and dashboard, on the contract's metric names.
    const metric = (name: string, pool: string | undefined, statistic: string) =>
      new cloudwatch.Metric({
        namespace,
        metricName: name,
        ...(pool ? { dimensionsMap: { [METRIC_DIMENSIONS.pool]: pool } } : {}),
        statistic,
        period: Duration.minutes(5),
      });
    const alarm = (alarmId: string, description: string, m: cloudwatch.IMetric, threshold: number, evaluationPeriods: number) => {
      const a = fleetAlarm(this, alarmId, { description, metric: m, threshold, evaluationPeriods });
      this.alarms.push(a);
      return a;
    };
    alarm(
      'DeadLetterAlarm',
      'Jobs reached the dead-letter queue: they were not served. What to do: docs/operations.md#dead-letter-queue',
      this.jobs.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' }),
      1,
      1,
    );
    alarm(
      'ActivationFailureAlarm',
      'Jobs failed to get a runner (after retries) in the last 5 minutes. What to do: docs/operations.md#jobs-failed',
      metric(METRIC_NAMES.jobsFailed, undefined, 'Sum'),
      1,
      1,
    );
    // Errors of every control-plane function (the release resolver's are in RunnerReleaseAlarm,
    // the webhook's in WebhookErrorAlarm). Without an exposure nothing reaches the webhook, and
    // every job's first copy is the reconciler's: its alarms and the lost-delivery one would
    // watch nothing, or page all the time.
    const reachable = exposure.kind !== WebhookExposureKind.NONE;
    this.alarms.push(
      ...functionErrorAlarms(this, [
        { id: 'ScaleUp', fn: this.scaleUpFunction, role: 'scale-up', anchor: 'scale-up-errors' },
        { id: 'Pool', fn: this.poolFunction, role: 'pool', anchor: 'function-errors', interval: props.poolInterval ?? Duration.minutes(1) },
        { id: 'ScaleDown', fn: this.scaleDownFunction, role: 'scale-down', anchor: 'function-errors', interval: props.scaleDownInterval ?? Duration.minutes(5) },
        ...(this.reconcileFunction ? [{ id: 'Reconcile', fn: this.reconcileFunction, role: 'reconcile', anchor: 'function-errors', interval: props.reconcileInterval ?? Duration.minutes(5) }] : []),
        ...(this.scaleSetListenerFunction ? [{ id: 'ScaleSetListener', fn: this.scaleSetListenerFunction, role: 'scale-set listener', anchor: 'function-errors', interval: Duration.minutes(1) }] : []),
      ]),
      ...(reachable ? webhookAlarms(this, this.webhookFunction, namespace) : []),
      ...(this.reconcileFunction && reachable ? [lostDeliveriesAlarm(this, namespace, props.reconcileInterval ?? Duration.minutes(5))] : []),
      ...(this.reconcileFunction ? [reconcileFailuresAlarm(this, namespace, props.reconcileInterval ?? Duration.minutes(5))] : []),
    );
    if (this.runnerReleaseFunction) {
      const hourly = (name: string, pool: string | undefined, statistic: string) => new cloudwatch.Metric({ ...metric(name, pool, statistic), period: Duration.hours(1) } as cloudwatch.MetricProps);
      alarm(
        'RunnerReleaseAlarm',
        `The newest runner release could not be resolved or was refused in ${RUNNER_RELEASE_ALARM_HOURS} hourly runs in a row (unreachable, checksums or downloads missing, version going backwards, checksums changed): the last good release stays in use. ` +
          `Why: Logs Insights on /aws/lambda/${this.runnerReleaseFunction.functionName}: fields @timestamp, provider, reason, detail | filter message like /not resolved|window unknown/ | sort @timestamp desc | limit 20. ` +
          'What to do: docs/operations.md#runner-updates',
        new cloudwatch.MathExpression({
          expression: 'problems + errors',
          usingMetrics: { problems: hourly(METRIC_NAMES.runnerReleaseProblems, undefined, 'Sum'), errors: this.runnerReleaseFunction.metricErrors({ period: Duration.hours(1) }) },
          period: Duration.hours(1),
        }),
        1,
        RUNNER_RELEASE_ALARM_HOURS,
      );
      for (const pool of this.config.pools.filter((p) => p.provider === Provider.GITHUB)) {
        const a = fleetAlarm(this, `RunnerVersionExpiring-${pool.name}`, {
          description:
            `The runner version pool ${pool.name} installs (${pool.runnerVersion === RUNNER_VERSION_LATEST ? 'the last resolved release' : `pinned ${pool.runnerVersion}`}) has ${RUNNER_PIN_WARN_DAYS} days or fewer before GitHub refuses it (30 days after a newer release came out). ` +
            'What to do: docs/operations.md#runner-updates',
          metric: hourly(METRIC_NAMES.runnerDaysLeft, pool.name, 'Minimum'),
          threshold: RUNNER_PIN_WARN_DAYS,
          evaluationPeriods: 1,
          comparison: cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
        });
        this.alarms.push(a);
      }
    }
    if (props.github) {
      // One figure the functions compute (the best App's fraction left, an App not heard from
      // counting as whole) rather than metric math over per-App metrics: an App a period's calls
      // did not use has no data point then, and only the functions know it is whole.
      const a = new cloudwatch.Alarm(this, 'GitHubAppsRateLimitLow', {
        alarmDescription:
          `Every GitHub App of the fleet has less than ${GITHUB_APPS_LOW_FRACTION * 100}% of its rate limit left (the best App's fraction, ${METRIC_NAMES.githubAppsBestRemainingFraction}): registrations, job look-ups and the sweep will soon be refused until the hourly reset. ` +
          `Per App: ${METRIC_NAMES.githubAppRateRemaining} and ${METRIC_NAMES.githubAppRateLimit} by ${METRIC_DIMENSIONS.appId}. What to do: docs/operations.md#github-rate-limit`,
        metric: metric(METRIC_NAMES.githubAppsBestRemainingFraction, undefined, 'Minimum'),
        threshold: GITHUB_APPS_LOW_FRACTION,
        // 2 of 3 periods: one period's low reading (a burst the hour's reset is about to end) does not page.
        evaluationPeriods: 3,
        datapointsToAlarm: 2,
        comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
      this.alarms.push(a);
    }
    const poolWidgets: cloudwatch.IWidget[] = [];
    for (const pool of this.config.pools) {
      // Maximum: a pool that refills within the period is not below target.
      const parked = metric(METRIC_NAMES.parked, pool.name, 'Maximum');
      const target = metric(METRIC_NAMES.target, pool.name, 'Maximum');
      if (pool.warm.size > 0 || pool.warm.schedule.length > 0) {
        alarm(
          `PrimeBackoff-${pool.name}`,
          `Pool ${pool.name} stopped relaunching warm standbys: ${pool.warm.primeFailureLimit} in a row failed to prime; it probes one per ${pool.warm.primeBackoffCapSeconds}s and resumes when one primes or the launch template changes. ` +
            `Last failure reason: Logs Insights on /aws/lambda/${this.poolFunction.functionName}: ` +
            `fields @timestamp, instanceId, reason, failuresInARow | filter message = "prime failed" and pool = "${pool.name}" | sort @timestamp desc | limit 20. ` +
            `The instance's own lines: Logs Insights on ${bootLogGroupName(prefix)}: fields @timestamp, @logStream, @message | filter @message like /error:|PRIME failed/ | sort @timestamp desc | limit 20. ` +
            'What to do: docs/operations.md#prime-back-off',
          metric(METRIC_NAMES.primeBackoff, pool.name, 'Maximum'),
          1,
          1,
        );
        alarm(
          `ParkedBelowTarget-${pool.name}`,
          `Pool ${pool.name} has had fewer parked instances than its target for 15 minutes. What to do: docs/operations.md#parked-below-target`,
          new cloudwatch.MathExpression({ expression: 'target - parked', usingMetrics: { target, parked }, period: Duration.minutes(5) }),
          1,
          3,
        );
      }
      poolWidgets.push(ledgerWidget(namespace, pool.name));
      if (pool.reuse) poolWidgets.push(reuseWidget(metric, pool.name));
      poolWidgets.push(
        new cloudwatch.GraphWidget({
          title: `Pool ${pool.name}`,
          left: [parked, metric(METRIC_NAMES.priming, pool.name, 'Maximum'), target, metric(METRIC_NAMES.active, pool.name, 'Maximum')],
          right: [metric(METRIC_NAMES.activations, pool.name, 'Sum'), metric(METRIC_NAMES.coldLaunches, pool.name, 'Sum')],
          width: 12,
        }),
      );
    }
    this.dashboard = new cloudwatch.Dashboard(this, 'Dashboard', { dashboardName: `${prefix}-runners` });
    this.dashboard.addWidgets(
      ...poolWidgets,
      new cloudwatch.GraphWidget({
        title: 'Activation latency (instance start to runner start, s)',
        left: [metric(METRIC_NAMES.activationLatency, undefined, 'p50'), metric(METRIC_NAMES.activationLatency, undefined, 'p90')],
        width: 12,
      }),
      new cloudwatch.GraphWidget({
        title: 'Jobs',
        left: [metric(METRIC_NAMES.jobsReceived, undefined, 'Sum'), metric(METRIC_NAMES.jobsFailed, undefined, 'Sum')],
        right: [this.jobs.deadLetterQueue.metricApproximateNumberOfMessagesVisible()],
        width: 12,
      }),
    );
    if (props.github) {
      const appIds = [props.github.appId, ...(props.github.additionalAppIds ?? [])];
      const perApp = (name: string, appId: string) =>
        new cloudwatch.Metric({ namespace, metricName: name, dimensionsMap: { [METRIC_DIMENSIONS.appId]: appId }, statistic: 'Minimum', period: Duration.minutes(5), label: `App ${appId}` });
      this.dashboard.addWidgets(
        new cloudwatch.GraphWidget({
          title: 'GitHub rate limit left per App (its most spent budget)',
          left: appIds.map((id) => perApp(METRIC_NAMES.githubAppRateRemaining, id)),
          right: [metric(METRIC_NAMES.githubAppsBestRemainingFraction, undefined, 'Minimum')],
          width: 12,
        }),
      );
    }

    if (props.github && this.webhookEndpoint) new CfnOutput(this, 'GitHubWebhookUrl', { description: 'Point the GitHub App webhook here', value: `${this.webhookEndpoint}github` });
    if (props.gitlab && this.webhookEndpoint) new CfnOutput(this, 'GitLabWebhookUrl', { description: 'Point the GitLab webhook here', value: `${this.webhookEndpoint}gitlab` });
    new CfnOutput(this, 'SecretParameters', {
      description: 'SecureString parameters to fill in after deploying (see docs/operations.md)',
      value: this.secretParameterNames.filter((n) => n !== paths.gitlab.webhookSigningKey).join(','),
    });
    if (props.gitlab) {
      new CfnOutput(this, 'OptionalSecretParameters', {
        description: 'Fill in to verify GitLab Standard Webhooks signatures as well as the token',
        value: paths.gitlab.webhookSigningKey,
      });
    }
    new CfnOutput(this, 'InstanceLogGroup', {
      description: "Log group the runners' boot scripts ship their logs to, one stream per instance id",
      value: this.fleet.logGroup.logGroupName,
    });

    // CloudFormation deletes it before every other part of the fleet (it depends on them all).
    this.drain = new FleetDrain(this, 'Drain', {
      prefix,
      fleet: this,
      configParameter: this.configParameter,
      secretParameterNames: [...secrets.githubApi, ...secrets.gitlabApi],
      ...(props.encryptionKey ? { encryptionKey: props.encryptionKey } : {}),
      logRetention,
    });
  }

  /**
   * The pool of this name, for the CDK verbs: `bucket.grantRead(runners.pool('deploy'))` grants to
   * its role, `runners.pool('deploy').connections` opens its security groups (the fleet's shared
   * ones for a pool that sets none). Throws for a name no pool has.
   */
  pool(name: string): RunnerPool {
    return this.fleet.pool(name);
  }
}

/**
 * A pool's latency ledger (contract ledger.ts): p50 and p95 of every stage, one widget.
 * `received` and the provider's job start count from the job's creation, the other webhook and
 * scale-up stages from the fleet's receipt, the instance's from its activation
 * (docs/operations.md).
 */
function ledgerWidget(namespace: string, pool: string): cloudwatch.GraphWidget {
  const stage = (name: LedgerStage, statistic: 'p50' | 'p95') =>
    new cloudwatch.Metric({
      namespace,
      metricName: METRIC_NAMES.jobStageSeconds,
      dimensionsMap: { [METRIC_DIMENSIONS.pool]: pool, [METRIC_DIMENSIONS.stage]: name },
      statistic,
      label: `${name} ${statistic}`,
      period: Duration.minutes(5),
    });
  return new cloudwatch.GraphWidget({
    title: `Job ledger ${pool} (p50, p95 s)`,
    left: LEDGER_STAGE_NAMES.flatMap((name) => [stage(name, 'p50'), stage(name, 'p95')]),
    width: 12,
  });
}

/**
 * A reusable pool's reuse (contract reuse.ts): jobs served by a parked instance of their own
 * scope (hits) and the others (misses, served fresh or cold), the hit rate, the idle-stops and
 * the parked instances that carry caches.
 */
function reuseWidget(metric: (name: string, pool: string, statistic: string) => cloudwatch.Metric, pool: string): cloudwatch.GraphWidget {
  const hits = metric(METRIC_NAMES.reuseHits, pool, 'Sum');
  const misses = metric(METRIC_NAMES.reuseMisses, pool, 'Sum');
  return new cloudwatch.GraphWidget({
    title: `Reuse ${pool}`,
    left: [hits, misses, metric(METRIC_NAMES.idleStops, pool, 'Sum')],
    right: [
      new cloudwatch.MathExpression({ expression: '100 * hits / (hits + misses)', usingMetrics: { hits, misses }, label: 'hit rate %', period: Duration.minutes(5) }),
      metric(METRIC_NAMES.parkedReused, pool, 'Maximum'),
    ],
    width: 12,
  });
}

/** The SecureString parameters each function needs, per configured connection. */
/** The scale-up Lambda's retry settings (lambdas/scale-up/retry.ts), from the props or the contract's defaults. */
function jobRetryOptionsOf(props: WarmRunnersProps): JobRetryOptions {
  return {
    retryAfterSeconds: props.jobRetryAfter?.toSeconds() ?? JOB_RETRY_DEFAULTS.retryAfterSeconds,
    limit: props.jobRetryLimit ?? JOB_RETRY_DEFAULTS.limit,
  };
}

function secretParameters(props: WarmRunnersProps, paths: ReturnType<typeof ssmPaths>) {
  // Each further App's key in its own parameter (the fleet config has validated the ids).
  const additionalAppKeys = (props.github?.additionalAppIds ?? []).map((id) => paths.githubAppPrivateKey(id));
  return {
    webhook: [
      // No webhook secret for a fleet whose GitHub pools are all scale sets: nothing delivers to it.
      ...(props.github && props.pools.some((p) => p.provider === Provider.GITHUB && p.scaleSetName === undefined) ? [paths.github.webhookSecret] : []),
      ...(props.gitlab ? [paths.gitlab.webhookToken, paths.gitlab.webhookSigningKey] : []),
    ],
    // The enterprise token only where a pool registers at an enterprise; read by the functions that register, list and delete runners.
    githubApi: props.github ? [paths.github.appPrivateKey, ...additionalAppKeys, ...(usesEnterprise(props) ? [paths.githubEnterpriseToken] : [])] : [],
    additionalAppKeys,
    gitlabApi: props.gitlab ? [paths.gitlab.token] : [],
  };
}

/** Whether a GitHub pool registers its runners at an enterprise (its own `enterprise` or the connection's). */
function usesEnterprise(props: WarmRunnersProps): boolean {
  return props.github?.enterprise !== undefined || props.pools.some((p) => p.provider === Provider.GITHUB && p.enterprise !== undefined);
}

/** Length of a string once its tokens resolve; ids such as lt-... and subnet-... fit 24 characters. */
function estimatedLength(text: string): number {
  return Token.isUnresolved(text) ? text.replace(/\$\{Token\[[^\]]+\]\}/g, 'x'.repeat(24)).length : text.length;
}
