import { CustomResource, Duration, Stack } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as ssm from 'aws-cdk-lib/aws-ssm';
import * as cr from 'aws-cdk-lib/custom-resources';
import { Construct } from 'constructs';
import { LAMBDA_ENV, scaleSetEntries, type FleetConfig } from '../lambdas/shared/contract';
import { BundledFunction, BundledHandler } from './bundled-function';
import { FUNCTION_MEMORY_MB } from './function-memory';
import { functionNetworkOf, grantVpcAccess } from './function-network';
import type { JobRecords } from './job-records';
import { acknowledgeWildcard } from './nag';

/** Props of a `ScaleSetResource`. */
export interface ScaleSetResourceProps {
  readonly prefix: string;
  readonly config: FleetConfig;
  readonly environment: Record<string, string>;
  readonly configParameter: ssm.IParameter;
  /** The fleet's table: the lease items of the scale sets it deletes (their sessions). */
  readonly jobRecords: JobRecords;
  /** ARNs of the GitHub App private key parameters. */
  readonly appPrivateKeyArns: string[];
  readonly encryptionKey?: kms.IKey;
  readonly logRetention: logs.RetentionDays;
}

/**
 * The fleet's runner scale sets at GitHub, created and updated with the stack and deleted
 * with it: a custom resource through the CDK provider framework. It is a part of the fleet,
 * so the drain (which depends on every part) is deleted first: the runners are gone when the
 * scale sets go (lambdas/scale-set-resource/handler.ts).
 */
export class ScaleSetResource extends Construct {
  readonly resource: CustomResource;
  readonly function: BundledFunction;

  constructor(scope: Construct, id: string, props: ScaleSetResourceProps) {
    super(scope, id);
    const stack = Stack.of(this);
    this.function = new BundledFunction(this, 'Function', {
      handler: BundledHandler.SCALE_SET_RESOURCE,
      description: `Creates, updates and deletes the runner scale sets of ${props.prefix} with the stack`,
      timeout: Duration.minutes(2),
      memorySize: FUNCTION_MEMORY_MB['scale-set-resource'],
      environment: { ...props.environment, [LAMBDA_ENV.jobRecordTable]: props.jobRecords.table.tableName },
      logRetention: props.logRetention,
    });
    const fn = this.function;
    // Before a scale set goes: the session its lease names is ended, and the lease item removed.
    props.jobRecords.grantScaleSetLeaseCleanup(fn);
    // The App keys (the scale-set calls), the FleetConfig (the connection), and this stack's
    // status: a Delete sent by an update that replaces the resource must not delete live scale sets.
    props.configParameter.grantRead(fn);
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameter'], resources: props.appPrivateKeyArns }));
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['cloudformation:DescribeStacks'], resources: [stack.stackId] }));
    if (props.encryptionKey) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({ actions: ['kms:Decrypt'], resources: [props.encryptionKey.keyArn], conditions: { StringEquals: { 'kms:ViaService': `ssm.${stack.region}.amazonaws.com` } } }),
      );
    }

    const frameworkLogs = new logs.LogGroup(this, 'FrameworkLogs', { retention: props.logRetention });
    const onEventRole = new iam.Role(this, 'FrameworkOnEventRole', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'), description: `Provider framework of the ${props.prefix} scale sets` });
    frameworkLogs.grantWrite(onEventRole);
    const network = functionNetworkOf(this);
    if (network?.vpc) grantVpcAccess(onEventRole, network);
    const provider = new cr.Provider(this, 'Provider', {
      frameworkOnEventRole: onEventRole,
      onEventHandler: fn,
      logGroup: frameworkLogs,
      ...(network?.vpc ? { vpc: network.vpc, securityGroups: network.securityGroups, ...(network.vpcSubnets ? { vpcSubnets: network.vpcSubnets } : {}) } : {}),
    });
    this.resource = new CustomResource(this, 'Resource', {
      serviceToken: provider.serviceToken,
      resourceType: 'Custom::RunnerScaleSets',
      properties: {
        // One JSON string: CloudFormation would turn numbers in nested properties into strings.
        ScaleSets: JSON.stringify(scaleSetEntries(props.config)),
        // New at each synthesis, so every deploy sends an Update and the scale sets are ensured
        // again: one deleted at GitHub since (by hand, or by GitHub) comes back with the next
        // deploy, whatever else changed. The price: the resource shows in every diff.
        DeployNonce: new Date().toISOString(),
      },
    });
    // The handler reads the FleetConfig parameter when it runs: CloudFormation writes it first.
    this.resource.node.addDependency(props.configParameter);
    acknowledgeWildcard(
      onEventRole,
      `<${stack.getLogicalId(fn.node.defaultChild as lambda.CfnFunction)}.Arn>:*`,
      'Invoking a function is granted with its versions (CDK grantInvoke adds "<arn>:*"); the function is the scale-set resource\'s own.',
    );
  }
}
