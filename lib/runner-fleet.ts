import { ArnFormat, Aws, RemovalPolicy, Size, Stack, Tags } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { followsLatestRunner } from './runner-version';
import {
  fleetMetricNamespace,
  INSTANCE_LEDGER_STAGES,
  LEDGER_LOG_FIELDS,
  LEDGER_LOG_KEYS,
  METRIC_DIMENSIONS,
  METRIC_NAMES,
  PARAMETER_INSTANCE_ARN_TAG,
  PARAMETER_INSTANCE_TAG,
  bootLogGroupName,
  ssmPaths,
  tagKeys,
  type LedgerStage,
} from '../lambdas/shared/contract';
import { DEFAULT_INSTANCE_TYPE } from './fleet-config-input';
import { acknowledgeWildcard, nagArn } from './nag';
import type { RunnerPoolProps } from './props';
import { encodeUserData, renderUserData } from './user-data';
import { poolPrepareCommands } from './pool-prepare-commands';
import { poolReuseConfig } from './pool-reuse-config';
import { ParameterMachineImage } from './parameter-machine-image';
import { poolRootDeviceName } from './root-device';

export interface RunnerFleetProps {
  /** VPC the runners run in. */
  readonly vpc: ec2.IVpc;
  /** The pools; each gets its own launch template. */
  readonly pools: RunnerPoolProps[];
  /** Fleet prefix (SSM paths, tag keys). */
  readonly prefix: string;
  /**
   * CloudWatch namespace of the activation latency metric.
   * @default - `CdkWarmRunners/<prefix>`, the fleet's own namespace
   */
  readonly metricNamespace?: string;
  /**
   * KMS key the runner config parameters are encrypted with.
   * @default - the AWS managed key alias/aws/ssm
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * Name of the root device of the pools' AMIs ("/dev/xvda" on Amazon Linux, "/dev/sda1" on
   * Ubuntu), for the pools that set none and whose image does not tell it.
   * @default '/dev/xvda'
   * @deprecated set `rootDeviceName` on the pool (`RunnerPoolProps`), or let its image decide
   */
  readonly rootDeviceName?: string;
  /**
   * Retention of the instance log group.
   * @default logs.RetentionDays.ONE_MONTH
   */
  readonly logRetention?: logs.RetentionDays;
  /**
   * SHA-256 of the fleet's extra CA certificates parameter (`UserDataOptions.caCertificatesSha256`):
   * the instances install them at boot.
   * @default - none
   */
  readonly caCertificatesSha256?: string;
}

/** One pool's launch template and the settings the control plane launches it with. */
export interface PoolLaunchTemplate {
  readonly pool: RunnerPoolProps;
  readonly launchTemplate: ec2.LaunchTemplate;
  /** The rendered user data as text, for size checks and review (the launch template carries it gzip-compressed). */
  readonly userData: string;
}

/**
 * The runner instances' side of the fleet: their role, security group, one launch template
 * per pool (IMDSv2 with instance tags, shutdown behaviour stop, encrypted gp3 root volume,
 * the rendered boot script) and the log group their boot script writes to.
 */
export class RunnerFleet extends Construct implements ec2.IConnectable, iam.IGrantable {
  /** Role of the runner instances. Grant it what your jobs need: `bucket.grantRead(fleet)`. */
  readonly role: iam.Role;
  readonly securityGroup: ec2.SecurityGroup;
  readonly connections: ec2.Connections;
  readonly grantPrincipal: iam.IPrincipal;
  readonly launchTemplates: PoolLaunchTemplate[];
  /** Log group of the instances' boot script. */
  readonly logGroup: logs.LogGroup;
  /** Parses the boot script's ledger lines at ingestion. */
  readonly logTransformer: logs.Transformer;
  /** Metric filter turning the boot script's runner-started ledger line into the activation latency metric. */
  readonly activationLatencyFilter: logs.MetricFilter;
  /** Metric filters turning the boot script's ledger lines into `JobStageSeconds`, one per instance stage. */
  readonly ledgerFilters: logs.MetricFilter[];

  constructor(scope: Construct, id: string, props: RunnerFleetProps) {
    super(scope, id);
    const tags = tagKeys(props.prefix);
    const paths = ssmPaths(props.prefix);
    const stack = Stack.of(this);

    this.securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: props.vpc,
      description: `Runner instances of ${props.prefix}: no ingress; egress to reach the CI service and AWS APIs`,
      allowAllOutbound: true,
    });
    this.connections = this.securityGroup.connections;

    this.role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('ec2.amazonaws.com'),
      description: `Runner instances of ${props.prefix}: read and delete their own config parameter, report their job start on themselves, terminate themselves, write their boot log`,
    });
    this.grantPrincipal = this.role;

    // The per-instance scoping is real IAM: scale-up tags each config parameter with its
    // instance's ARN, and the statement ties that tag to the calling instance through the
    // `ec2:SourceInstanceARN` policy variable, which EC2 role credentials carry. The tag key is
    // `aws:ResourceTag/<key>`, the one the Service Authorization Reference lists on the rows of
    // ssm:GetParameter and ssm:DeleteParameter (`ssm:resourceTag/<key>` appears only in its
    // parameter resource-type table). Under IfExists a key the request lacks holds, so the key
    // must be one AWS documents for these actions.
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'ReadAndDeleteOwnRunnerConfig',
        actions: ['ssm:GetParameter', 'ssm:DeleteParameter'],
        resources: [stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: `${paths.runnerConfigRoot.slice(1)}*` })],
        // IfExists: IAM sees no tags on a parameter that does not exist yet, and a waiting
        // instance must get ParameterNotFound there, not AccessDenied (the boot script tells
        // the two apart). Only scale-up can create parameters here, always with the tag.
        conditions: { StringEqualsIfExists: { [`aws:ResourceTag/${PARAMETER_INSTANCE_ARN_TAG}`]: '${ec2:SourceInstanceARN}' } },
      }),
    );
    // With IfExists, a parameter under the config path that lacks the ARN tag would be open to
    // every instance; the pool's eviction marker is such a parameter (tagged with the id only,
    // so no instance may read it). Deny what carries the id tag but not the ARN tag.
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'NoUntaggedRunnerParameters',
        effect: iam.Effect.DENY,
        actions: ['ssm:GetParameter', 'ssm:DeleteParameter'],
        resources: [stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: `${paths.runnerConfigRoot.slice(1)}*` })],
        conditions: {
          Null: {
            [`aws:ResourceTag/${PARAMETER_INSTANCE_TAG}`]: 'false',
            [`aws:ResourceTag/${PARAMETER_INSTANCE_ARN_TAG}`]: 'true',
          },
        },
      }),
    );
    if (props.encryptionKey) {
      this.role.addToPrincipalPolicy(
        new iam.PolicyStatement({
          sid: 'DecryptRunnerConfigThroughSsm',
          actions: ['kms:Decrypt'],
          resources: [props.encryptionKey.keyArn],
          conditions: { StringEquals: { 'kms:ViaService': `ssm.${Aws.REGION}.amazonaws.com` } },
        }),
      );
    }
    // Self-termination: `aws:ARN` is the target instance's ARN; the pool tag keeps the grant
    // inside this fleet even if that key's meaning ever changed (see docs/security.md).
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'TerminateSelf',
        actions: ['ec2:TerminateInstances'],
        resources: [stack.formatArn({ service: 'ec2', resource: 'instance', resourceName: '*' })],
        conditions: {
          StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}' },
          Null: { [`aws:ResourceTag/${tags.pool}`]: 'false' },
        },
      }),
    );

    // The job-start report (templates/start-runner.sh, watch_job): this tag key only, on itself only.
    // ForAllValues holds for a request without tags too, hence the Null check on aws:TagKeys.
    const ownInstances = [stack.formatArn({ service: 'ec2', resource: 'instance', resourceName: '*' })];
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'TagOwnJobStart',
        actions: ['ec2:CreateTags'],
        resources: ownInstances,
        conditions: {
          StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}' },
          'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.jobStarted] },
          Null: { [`aws:ResourceTag/${tags.pool}`]: 'false', 'aws:TagKeys': 'false' },
        },
      }),
    );
    // The reason a cold launch failed before its runner started (on_exit, counted by the pool's
    // back-off), only while the instance has not reported a job: job code, which runs with this
    // role, cannot charge its own instance to the back-off once its job started.
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'TagOwnStartFailure',
        actions: ['ec2:CreateTags'],
        resources: ownInstances,
        conditions: {
          StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}' },
          'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.startFailure] },
          Null: { [`aws:ResourceTag/${tags.pool}`]: 'false', 'aws:TagKeys': 'false', [`aws:ResourceTag/${tags.jobStarted}`]: 'true' },
        },
      }),
    );
    // Runner updates: the version an instance installed, on itself only (templates/install-runner.sh,
    // tag_version). Job code runs with this role and could rewrite it on its own instance: that
    // misleads the pool about that one instance only (kept or replaced for it), nothing else.
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'TagOwnRunnerVersion',
        actions: ['ec2:CreateTags'],
        resources: ownInstances,
        conditions: {
          StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}' },
          'ForAllValues:StringEquals': { 'aws:TagKeys': [tags.runnerVersion] },
          Null: { [`aws:ResourceTag/${tags.pool}`]: 'false', 'aws:TagKeys': 'false' },
        },
      }),
    );
    // A pool that follows the newest release reads its provider's resolved release at install time.
    const followed = [...new Set(props.pools.filter((p) => followsLatestRunner(p)).map((p) => p.provider))];
    if (followed.length > 0) {
      this.role.addToPrincipalPolicy(
        new iam.PolicyStatement({
          sid: 'ReadResolvedRunnerRelease',
          actions: ['ssm:GetParameter'],
          resources: followed.map((provider) => stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: paths.runnerRelease(provider).slice(1) })),
        }),
      );
    }
    this.grantParking(ownInstances, props.pools.filter((p) => p.reuse !== undefined).map((p) => p.name), tags);

    acknowledgeWildcard(
      this.role,
      nagArn('ssm', `parameter${paths.runnerConfigRoot}*`),
      'Each instance reaches only the config parameter tagged with its own ARN (condition aws:ResourceTag = ${ec2:SourceInstanceARN}); instance ids are known only at run time.',
    );
    acknowledgeWildcard(
      this.role,
      nagArn('ec2', 'instance/*'),
      'An instance may terminate only itself and tag only itself with its job-start key, and an instance of a reusable pool untag and tag itself with its parking keys (condition aws:ARN = ${ec2:SourceInstanceARN}), only within this fleet (pool tag present).',
    );

    const logGroupName = bootLogGroupName(props.prefix);
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      logGroupName,
      retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    // The boot script ships its own log (no agent on the AMI): a stream per instance, created
    // by the instance, in this group only. `log-group:<name>:*` is the form IAM uses for
    // CreateLogStream and covers the group's streams for PutLogEvents (CloudWatch Logs user
    // guide, "Overview of managing access permissions"). Spelled out (not grantWrite, which
    // gives the same actions) so the statement is named and the permission tests can read it.
    const logStreams = stack.formatArn({
      service: 'logs',
      resource: 'log-group',
      resourceName: `${logGroupName}:*`,
      arnFormat: ArnFormat.COLON_RESOURCE_NAME,
    });
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'WriteOwnBootLog',
        actions: ['logs:CreateLogStream', 'logs:PutLogEvents'],
        resources: [logStreams],
      }),
    );
    acknowledgeWildcard(
      this.role,
      nagArn('logs', `log-group:${logGroupName}:*`),
      "The fleet's one boot log group: each instance writes a stream named after its instance id, known only at run time.",
    );
    // The boot script logs its ledger lines as `<time> start-runner[pid]: trace-id=<id>
    // ledger-pool=<pool> ledger-stage=<stage> ledger-seconds=<s>` (contract ledger.ts). Metric
    // filters cannot split `key=value`, so a transformer parses the values out at ingestion
    // (one grok per transformer, so one line shape) and the filters read the transformed event.
    const f = LEDGER_LOG_FIELDS;
    const k = LEDGER_LOG_KEYS;
    this.logTransformer = new logs.Transformer(this, 'LogTransformer', {
      transformerName: 'boot-log',
      logGroup: this.logGroup,
      transformerConfig: [
        new logs.ParserProcessor({
          type: logs.ParserProcessorType.GROK,
          grokOptions: { match: `%{GREEDYDATA}${k.pool}=%{NOTSPACE:${f.pool}} ${k.stage}=%{NOTSPACE:${f.stage}} ${k.seconds}=%{NUMBER:${f.seconds}}` },
        }),
        // Grok extracts text; the metric filter needs a number, so cast it rather than rely on
        // the filter's own coercion of "3.250".
        new logs.DataConverterProcessor({
          type: logs.DataConverterType.TYPE_CONVERTER,
          typeConverterOptions: { entries: [{ key: f.seconds, type: logs.TypeConverterType.DOUBLE }] },
        }),
      ],
    });
    const namespace = props.metricNamespace ?? fleetMetricNamespace(props.prefix);
    const onTransformed = (filter: logs.MetricFilter) => {
      const cfn = filter.node.defaultChild as logs.CfnMetricFilter;
      cfn.applyOnTransformedLogs = true;
      cfn.node.addDependency(this.logTransformer);
      return filter;
    };
    // Only samples at or above 0 reach the metric: CloudWatch gives no percentile of a metric
    // holding a negative value, and the boot script's clock may read below its activation tag's.
    const stageIs = (stage: LedgerStage) => logs.FilterPattern.all(logs.FilterPattern.stringValue(`$.${f.stage}`, '=', stage), logs.FilterPattern.numberValue(`$.${f.seconds}`, '>=', 0));
    // Runner started, measured from the activation tag, is the activation latency.
    this.activationLatencyFilter = onTransformed(
      new logs.MetricFilter(this, 'ActivationLatency', {
        logGroup: this.logGroup,
        metricNamespace: namespace,
        metricName: METRIC_NAMES.activationLatency,
        filterPattern: stageIs('runner-started'),
        metricValue: `$.${f.seconds}`,
        unit: cloudwatch.Unit.SECONDS,
      }),
    );
    // The instance's ledger stages, per pool and stage, as the Lambdas publish theirs.
    this.ledgerFilters = INSTANCE_LEDGER_STAGES.map((stage) =>
      onTransformed(
        new logs.MetricFilter(this, `Ledger-${stage}`, {
          logGroup: this.logGroup,
          metricNamespace: namespace,
          metricName: METRIC_NAMES.jobStageSeconds,
          filterPattern: stageIs(stage),
          metricValue: `$.${f.seconds}`,
          dimensions: { [METRIC_DIMENSIONS.pool]: `$.${f.pool}`, [METRIC_DIMENSIONS.stage]: `$.${f.stage}` },
          unit: cloudwatch.Unit.SECONDS,
        }),
      ),
    );

    this.launchTemplates = props.pools.map((pool) => {
      let userData: string;
      try {
        userData = renderUserData({
          prefix: props.prefix,
          provider: pool.provider,
          ...(pool.runnerUser === undefined ? {} : { runnerUser: pool.runnerUser }),
          ...(pool.runnerDirectory === undefined ? {} : { runnerDir: pool.runnerDirectory }),
          ...(pool.runnerPackage === undefined ? {} : { runnerPackage: pool.runnerPackage }),
          followLatestRunner: followsLatestRunner(pool),
          prepareCommands: poolPrepareCommands(pool),
          ...(pool.reuse ? { reuse: poolReuseConfig(pool) } : {}),
          ...(pool.docker ? { docker: pool.docker } : {}),
          ...(props.caCertificatesSha256 ? { caCertificatesSha256: props.caCertificatesSha256 } : {}),
        });
      } catch (e) {
        throw new Error(`pool "${pool.name}": ${(e as Error).message}`);
      }
      const launchTemplate = new ec2.LaunchTemplate(this, `LaunchTemplate-${pool.name}`, {
        machineImage: pool.machineImage,
        instanceType: pool.instanceTypes?.[0] ?? DEFAULT_INSTANCE_TYPE,
        role: this.role,
        securityGroup: this.securityGroup,
        // Kept as text for readers of `launchTemplate.userData`; the template carries its gzip (below).
        userData: ec2.UserData.custom(userData),
        requireImdsv2: true,
        httpTokens: ec2.LaunchTemplateHttpTokens.REQUIRED,
        httpPutResponseHopLimit: 1,
        instanceMetadataTags: true,
        // A warm instance parks by powering itself off; that must stop it, not terminate it.
        instanceInitiatedShutdownBehavior: ec2.InstanceInitiatedShutdownBehavior.STOP,
        blockDevices: [
          {
            deviceName: poolRootDeviceName(pool, props.rootDeviceName),
            volume: ec2.BlockDeviceVolume.ebs((pool.diskSize ?? Size.gibibytes(30)).toGibibytes(), {
              volumeType: ec2.EbsDeviceVolumeType.GP3,
              encrypted: true,
              deleteOnTermination: true,
            }),
          },
        ],
        detailedMonitoring: false,
      });
      // The template tags what it launches (CDK's Name tag and any tag a user puts on the
      // stack) on the instance and its volume, and tags at launch are authorized with them:
      // the pool tag among them is what the launchers' CreateTags grants require (an instant
      // CreateFleet can tag only its instances, so the volume's tags are the template's).
      Tags.of(launchTemplate).add(tags.pool, pool.name);
      // gzip: the script's text is near EC2's 16 KB limit, its compressed form far below it.
      // ec2.UserData is text (rendered through Fn::Base64), hence the override on the L1.
      (launchTemplate.node.defaultChild as ec2.CfnLaunchTemplate).addPropertyOverride('LaunchTemplateData.UserData', encodeUserData(userData));
      // A RunnerImage's parameter exists only once its seed ran: every launch resolves it.
      if (pool.machineImage instanceof ParameterMachineImage && pool.machineImage.creator) launchTemplate.node.addDependency(pool.machineImage.creator);
      return { pool, launchTemplate, userData };
    });
  }
  /**
   * Parking after a job (contract reuse.ts, step 4), for the instances of reusable pools only:
   * the role is shared by every pool, so the pool tag's value narrows the grant to them. Each
   * instance on itself only (aws:ARN), only the keys parking writes (`parking` when its runner
   * ended; `uses`, `warm-standby` when it parks) and the keys it removes then (its
   * activation's; never `parking`, which the pool bounds a parking instance by). Never `affinity`: scale-up writes it, and candidates are ordered by it, so a
   * job (it runs with this role) that could write it could have its instance offered to another
   * repository's jobs (R1). What the job can still write costs at most a refused claim or a
   * longer life, bounded by maxAge and the pool's eviction (docs/security.md).
   */
  private grantParking(ownInstances: string[], reusablePools: string[], tags: ReturnType<typeof tagKeys>): void {
    if (reusablePools.length === 0) return;
    const onItself = (keys: string[]) => ({
      StringEquals: { 'aws:ARN': '${ec2:SourceInstanceARN}', [`aws:ResourceTag/${tags.pool}`]: reusablePools },
      'ForAllValues:StringEquals': { 'aws:TagKeys': keys },
      Null: { 'aws:TagKeys': 'false' },
    });
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'TagOwnParking',
        actions: ['ec2:CreateTags'],
        resources: ownInstances,
        conditions: onItself([tags.parking, tags.uses, tags.warmStandby]),
      }),
    );
    // Null on aws:TagKeys matters most here: a DeleteTags without keys removes every tag.
    this.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        sid: 'UntagOwnActivation',
        actions: ['ec2:DeleteTags'],
        resources: ownInstances,
        conditions: onItself([tags.activatedAt, tags.traceId, tags.jobId, tags.runnerId, tags.jobStarted, tags.idleSince]),
      }),
    );
  }
}


