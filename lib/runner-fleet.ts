import { Annotations, RemovalPolicy, Size, Tags } from 'aws-cdk-lib';
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
  bootLogGroupName,
  ssmPaths,
  tagKeys,
  type LedgerStage,
} from '../lambdas/shared/contract';
import { DEFAULT_INSTANCE_TYPE } from './fleet-config-input';
import { grantInstance, instanceStatements } from './instance-grants';
import type { RunnerPoolProps } from './props';
import { encodeUserData, renderUserData } from './user-data';
import { poolPrepareCommands } from './pool-prepare-commands';
import { poolReuseConfig } from './pool-reuse-config';
import { ParameterMachineImage } from './parameter-machine-image';
import { poolRootDeviceName } from './root-device';
import { poolInstances, RunnerPool } from './runner-pool';

export interface RunnerFleetProps {
  /** VPC the runners run in. */
  readonly vpc: ec2.IVpc;
  /** The pools; each gets its own launch template. */
  readonly pools: RunnerPoolProps[];
  /**
   * Subnets the pools that set no `vpcSubnets` launch in.
   * @default - the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
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
  /**
   * The shared role of the runner instances of every pool that sets no `instanceRole`. Grant it
   * what their jobs need: `bucket.grantRead(fleet)`. A pool with its own role gets none of it:
   * grant to `fleet.pool(name)`.
   */
  readonly role: iam.Role;
  /** The shared security group of every pool that sets no `securityGroups`. */
  readonly securityGroup: ec2.SecurityGroup;
  /** The shared security group's connections (pools with their own: `fleet.pool(name).connections`). */
  readonly connections: ec2.Connections;
  /** The shared role (pools with their own: `fleet.pool(name)`). */
  readonly grantPrincipal: iam.IPrincipal;
  readonly launchTemplates: PoolLaunchTemplate[];
  /** Each pool's instances (role, security groups, subnets, launch template), in the order of `pools`. */
  readonly pools: RunnerPool[];
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

    // Each pool's role, security groups and subnets (its own or the fleet's), then the
    // instance grants once per role, for the pools whose instances run with it.
    const defaults = { vpc: props.vpc, role: this.role, securityGroup: this.securityGroup, ...(props.vpcSubnets ? { vpcSubnets: props.vpcSubnets } : {}) };
    const instances = props.pools.map((pool, i) => poolInstances(this, pool, i, defaults));
    const statementsOf = new Map<iam.IRole, iam.PolicyStatement[]>();
    for (const role of new Set(instances.map((x) => x.role))) {
      const pools = props.pools.filter((_p, i) => instances[i]!.role === role);
      const statements = instanceStatements(this, {
        prefix: props.prefix,
        pools,
        ...(props.encryptionKey ? { encryptionKey: props.encryptionKey } : {}),
        ...(props.caCertificatesSha256 ? { caParameterName: ssmPaths(props.prefix).caCertificates } : {}),
      });
      statementsOf.set(role, statements);
      if (!grantInstance(role, statements, props.prefix)) {
        const names = pools.map((p) => `pools[${props.pools.indexOf(p)}].instanceRole (pool "${p.name}")`).join(', ');
        Annotations.of(this).addWarningV2(
          'cdk-warm-runners:instance-role-immutable',
          `${names}: the role takes no policy from this stack (imported with mutable: false), so its instances cannot read their config or tag themselves: ` +
            "attach runners.pool(name).instanceStatements to it yourself (docs/security.md, \"Per-pool isolation\"), or import it mutable",
        );
      }
    }

    const logGroupName = bootLogGroupName(props.prefix);
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      logGroupName,
      retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
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

    this.launchTemplates = props.pools.map((pool, index) => {
      const { role, securityGroups } = instances[index]!;
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
        throw new Error(`pools[${index}] (pool "${pool.name}"): ${(e as Error).message}`);
      }
      const launchTemplate = new ec2.LaunchTemplate(this, `LaunchTemplate-${pool.name}`, {
        machineImage: pool.machineImage,
        instanceType: pool.instanceTypes?.[0] ?? DEFAULT_INSTANCE_TYPE,
        role,
        securityGroup: securityGroups[0],
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
      for (const sg of securityGroups.slice(1)) launchTemplate.addSecurityGroup(sg);
      return { pool, launchTemplate, userData };
    });
    this.pools = this.launchTemplates.map(({ pool, launchTemplate }, i) => RunnerPool._of(pool.name, instances[i]!, launchTemplate, statementsOf.get(instances[i]!.role)!));
  }

  /** The pool of this name (its role, security groups, launch template); throws for a name no pool has. */
  pool(name: string): RunnerPool {
    const found = this.pools.find((p) => p.name === name);
    if (!found) throw new Error(`no pool is named "${name}": the fleet's pools are ${this.pools.map((p) => `"${p.name}"`).join(', ')}`);
    return found;
  }
}
