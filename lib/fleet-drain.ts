import { Aspects, CustomResource, Duration, Lazy, Stack, Validations } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import type * as ssm from 'aws-cdk-lib/aws-ssm';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as cr from 'aws-cdk-lib/custom-resources';
import { Construct, type IConstruct } from 'constructs';
import { LAMBDA_ENV, ssmPaths, tagKeys } from '../lambdas/shared/contract';
import { BundledFunction, BundledHandler } from './bundled-function';
import { FUNCTION_MEMORY_MB } from './function-memory';
import { functionNetworkOf, grantVpcAccess } from './function-network';
import { acknowledgeWildcard, nagArn } from './nag';
import { SCHEDULED_MAX_EVENT_AGE } from './scheduled-invoke';

/** Props of a `FleetDrain`. */
export interface FleetDrainProps {
  /** Prefix of the fleet's SSM paths and tag keys. */
  readonly prefix: string;
  /**
   * The construct whose tree holds the fleet: its event source mappings and EventBridge rules
   * are disabled on delete, its functions' longest timeout is waited out, and each of its
   * parts is deleted only after the drain (create the drain after all of them).
   */
  readonly fleet: IConstruct;
  /** The String parameter holding the fleet's FleetConfig. */
  readonly configParameter: ssm.IParameter;
  /** Names of the CI credential parameters the drain deregisters runners with (as scale-down). */
  readonly secretParameterNames: string[];
  /**
   * The customer managed key the credential parameters are encrypted with; the drain may
   * decrypt with it through SSM only, to read them.
   * @default - the parameters use the AWS managed key (aws/ssm)
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * How long the drain may take before it fails the delete (DELETE_FAILED, naming what is
   * left). At least 10 minutes, at most one hour (the provider framework's bound).
   * @default Duration.minutes(30)
   */
  readonly timeout?: Duration;
  /**
   * Retention of the drain's log groups.
   * @default logs.RetentionDays.ONE_MONTH
   */
  readonly logRetention?: logs.RetentionDays;
}

/** Time between isComplete polls. */
const QUERY_INTERVAL = Duration.seconds(15);
/** Extra wait beyond the longest function timeout: a mapping takes a moment from Disabling to Disabled. */
const QUIET_MARGIN_SECONDS = 60;
/** The drain fails itself this long before the framework's own timeout, so the reason is its own. */
const DEADLINE_MARGIN_SECONDS = 120;

/**
 * Drains a fleet when its stack is deleted (`cdk destroy`, or the rollback of a failed
 * create): a custom resource through the CDK provider framework that CloudFormation deletes
 * before every other part of the fleet. A Delete sent by an update (the construct renamed,
 * replaced or removed) drains nothing: the handler reads the stack's status first. onEvent disables the fleet's event source mappings and schedules, so
 * nothing launches any more; isComplete then polls: terminates every fleet instance (parked
 * ones too), deletes the fleet's run-time parameters, deregisters its runners at GitHub and
 * GitLab, and lets CloudFormation continue once nothing is left. Past `timeout` the delete
 * fails with what is left as the reason (docs/operations.md, "What `cdk destroy` does").
 * Create and Update do nothing, and Update keeps the physical id.
 */
export class FleetDrain extends Construct {
  /** The custom resource; every part of the fleet is deleted after it. */
  readonly resource: CustomResource;
  /** Stops scaling (onEvent). */
  readonly onEventFunction: BundledFunction;
  /** Drains and reports (isComplete). */
  readonly isCompleteFunction: BundledFunction;

  constructor(scope: Construct, id: string, props: FleetDrainProps) {
    super(scope, id);
    const timeout = props.timeout ?? Duration.minutes(30);
    if (timeout.toSeconds() < 600 || timeout.toSeconds() > 3600) {
      throw new Error(`drain timeout ${timeout.toHumanString()} is outside 10 minutes to 1 hour: the drain waits out the fleet's function timeouts and instance terminations, and the provider framework allows at most 1 hour`);
    }
    const stack = Stack.of(this);
    const paths = ssmPaths(props.prefix);
    const tags = tagKeys(props.prefix);
    const logRetention = props.logRetention ?? logs.RetentionDays.ONE_MONTH;

    // Everything under the fleet but the drain itself, gathered at synth so a part added to
    // the fleet after this constructor is still covered.
    const inFleet = <T extends IConstruct>(kind: abstract new (...args: never[]) => T) => () =>
      props.fleet.node.findAll().filter((c): c is T => c instanceof kind && !c.node.path.startsWith(`${this.node.path}/`) && c !== (this as IConstruct));
    const mappings = inFleet(lambda.EventSourceMapping);
    const rules = inFleet(events.Rule);
    const functions = inFleet(lambda.Function);
    const environment = {
      [LAMBDA_ENV.fleetConfigParameter]: paths.fleetConfig,
      [LAMBDA_ENV.drainEventSourceMappings]: Lazy.string({ produce: () => mappings().map((m) => m.eventSourceMappingId).join(',') }),
      [LAMBDA_ENV.drainSchedules]: Lazy.string({ produce: () => rules().map((r) => r.ruleName).join(',') }),
      // Lambda's default timeout is 3 s. A scheduled event may wait up to its maximum age before it runs.
      [LAMBDA_ENV.drainQuietSeconds]: Lazy.string({
        produce: () => String(Math.max(0, ...functions().map((f) => f.timeout?.toSeconds() ?? 3)) + SCHEDULED_MAX_EVENT_AGE.toSeconds() + QUIET_MARGIN_SECONDS),
      }),
      [LAMBDA_ENV.drainDeadlineSeconds]: String(timeout.toSeconds() - DEADLINE_MARGIN_SECONDS),
    };
    this.onEventFunction = new BundledFunction(this, 'StopScaling', {
      handler: BundledHandler.DRAIN,
      exportName: 'onEvent',
      description: `Stops ${props.prefix} scaling when the fleet is deleted (disables its event sources and schedules)`,
      timeout: Duration.minutes(2),
      memorySize: FUNCTION_MEMORY_MB.drain,
      environment,
      logRetention,
    });
    this.isCompleteFunction = new BundledFunction(this, 'Drain', {
      handler: BundledHandler.DRAIN,
      exportName: 'isComplete',
      description: `Drains ${props.prefix} when the fleet is deleted: terminates its instances, deletes its parameters, deregisters its runners`,
      // One poll acts for at most 90 s, then finishes its last calls; a poll that timed out
      // would fail the delete with Lambda's message instead of the drain's.
      timeout: Duration.minutes(5),
      memorySize: FUNCTION_MEMORY_MB.drain,
      environment,
      logRetention,
    });

    // Stopping scaling: both functions (isComplete disables again what it observes enabled).
    const mappingArns = Lazy.list({ produce: () => mappings().map((m) => m.eventSourceMappingArn) });
    const ruleArns = Lazy.list({ produce: () => rules().map((r) => r.ruleArn) });
    for (const [fn, observe] of [[this.onEventFunction, false], [this.isCompleteFunction, true]] as const) {
      // On the role itself: Function.addToRolePolicy puts statements with list tokens in a policy of their own.
      fn.role!.addToPrincipalPolicy(new iam.PolicyStatement({ actions: ['lambda:UpdateEventSourceMapping', ...(observe ? ['lambda:GetEventSourceMapping'] : [])], resources: mappingArns }));
      fn.role!.addToPrincipalPolicy(new iam.PolicyStatement({ actions: ['events:DisableRule', ...(observe ? ['events:DescribeRule'] : [])], resources: ruleArns }));
    }

    // onEvent reads this stack's status: a Delete sent by an update (the drain renamed or
    // replaced) must not drain the live fleet. This stack only.
    this.onEventFunction.addToRolePolicy(new iam.PolicyStatement({ actions: ['cloudformation:DescribeStacks'], resources: [stack.stackId] }));

    // Draining: the fleet's instances (its pool tag), its run-time parameters, its CI credentials.
    const drain = this.isCompleteFunction;
    props.configParameter.grantRead(drain);
    const parameterArn = (name: string) => stack.formatArn({ service: 'ssm', resource: 'parameter', resourceName: name.replace(/^\//, '') });
    // The release root always: a parameter written while a pool followed the newest release outlives a later pin.
    const roots = [paths.runnerConfigRoot, paths.poolStateRoot, paths.runnerReleaseRoot];
    if (props.secretParameterNames.length > 0) drain.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameter'], resources: props.secretParameterNames.map(parameterArn) }));
    if (props.encryptionKey) {
      // Without it the credential cannot be read, and no runner deregistered.
      drain.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['kms:Decrypt'],
          resources: [props.encryptionKey.keyArn],
          conditions: { StringEquals: { 'kms:ViaService': `ssm.${stack.region}.amazonaws.com` } },
        }),
      );
    }
    drain.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParametersByPath'], resources: roots.map((r) => parameterArn(r.replace(/\/$/, ''))) }));
    drain.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:DeleteParameters'], resources: roots.map((r) => parameterArn(`${r}*`)) }));
    // Describe calls take no resource-level permissions.
    drain.addToRolePolicy(new iam.PolicyStatement({ actions: ['ec2:DescribeInstances'], resources: ['*'] }));
    drain.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['ec2:TerminateInstances'],
        resources: [stack.formatArn({ service: 'ec2', resource: 'instance', resourceName: '*' })],
        conditions: { Null: { [`aws:ResourceTag/${tags.pool}`]: 'false' } },
      }),
    );
    drain.addToRolePolicy(
      new iam.PolicyStatement({ actions: ['ec2:CancelSpotInstanceRequests'], resources: [stack.formatArn({ service: 'ec2', resource: 'spot-instances-request', resourceName: '*' })] }),
    );

    const frameworkLogs = new logs.LogGroup(this, 'FrameworkLogs', { retention: logRetention });
    // Own roles for the framework's functions: write to their log group only, instead of the
    // managed AWSLambdaBasicExecutionRole (every log group in the account).
    const frameworkRole = (roleId: string) => {
      const role = new iam.Role(this, roleId, { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'), description: `Provider framework of the ${props.prefix} drain` });
      frameworkLogs.grantWrite(role);
      return role;
    };
    const onEventRole = frameworkRole('FrameworkOnEventRole');
    const waiterRole = frameworkRole('FrameworkWaiterRole');
    // The framework's functions talk to AWS only (Lambda, Step Functions, the response URL in
    // S3), yet go in the fleet's VPC too: an account may require every function in one.
    const network = functionNetworkOf(this);
    if (network?.vpc) for (const role of [onEventRole, waiterRole]) grantVpcAccess(role, network);
    const provider = new cr.Provider(this, 'Provider', {
      frameworkOnEventRole: onEventRole,
      frameworkCompleteAndTimeoutRole: waiterRole,
      onEventHandler: this.onEventFunction,
      isCompleteHandler: this.isCompleteFunction,
      queryInterval: QUERY_INTERVAL,
      totalTimeout: timeout,
      logGroup: frameworkLogs,
      disableWaiterStateMachineLogging: false,
      waiterStateMachineLogOptions: { destination: frameworkLogs, level: sfn.LogLevel.ALL },
      ...(network?.vpc ? { vpc: network.vpc, securityGroups: network.securityGroups, ...(network.vpcSubnets ? { vpcSubnets: network.vpcSubnets } : {}) } : {}),
    });
    this.resource = new CustomResource(this, 'Resource', { serviceToken: provider.serviceToken, resourceType: 'Custom::FleetDrain' });

    // Deleted before every other part of the fleet (created after them): what the drain calls
    // (functions, parameters, roles) and what it must empty first (the security group, whose
    // instances' interfaces block its deletion) still exist while it runs.
    // At synth (an aspect runs before dependencies are rendered), so a part added to the fleet
    // after this constructor is covered too.
    const resource = this.resource;
    const drainScopes = new Set<IConstruct>([this, ...this.node.scopes]);
    Aspects.of(this).add({
      visit: (node) => {
        if (node !== resource) return;
        for (const part of props.fleet.node.children) if (!drainScopes.has(part)) resource.node.addDependency(part);
      },
    });

    const reasons = {
      instances: "Only this fleet's instances: TerminateInstances is conditioned on the fleet's pool tag; instance ids are known only at run time.",
      parameters: "Only this fleet's run-time parameters (runner configs, pool state), one per instance or pool, named at run time.",
      spot: 'Spot requests are created by the fleet\'s launches at run time; their ids are not known at deploy time. Cancelling them keeps a persistent request from relaunching a terminated instance.',
      any: 'DescribeInstances takes no resource-level permissions.',
    };
    acknowledgeWildcard(drain.role!, '*', reasons.any);
    acknowledgeWildcard(drain.role!, nagArn('ec2', 'instance/*'), reasons.instances);
    acknowledgeWildcard(drain.role!, nagArn('ec2', 'spot-instances-request/*'), reasons.spot);
    for (const root of roots) acknowledgeWildcard(drain.role!, nagArn('ssm', `parameter${root}*`), reasons.parameters);
    // The provider framework's own grants: invoking a function grants its versions too (":*"),
    // and Step Functions' log delivery calls take no resource-level permissions.
    const invoke = 'Invoking a function is granted with its versions (CDK grantInvoke adds "<arn>:*"); the functions are the drain\'s own.';
    const functionsInvoked = (...fns: lambda.IFunction[]) => fns.map((fn) => `<${stack.getLogicalId(fn.node.defaultChild as lambda.CfnFunction)}.Arn>:*`);
    const framework = (name: string) => provider.node.findChild(name).node.defaultChild as lambda.CfnFunction;
    for (const role of [onEventRole, waiterRole]) {
      for (const resource of functionsInvoked(this.onEventFunction, this.isCompleteFunction)) acknowledgeWildcard(role, resource, invoke);
    }
    const waiter = provider.node.findChild('waiter-state-machine');
    for (const name of ['framework-isComplete', 'framework-onTimeout']) acknowledgeWildcard(waiter, `<${stack.getLogicalId(framework(name))}.Arn>:*`, invoke);
    acknowledgeWildcard(waiter, '*', 'CloudWatch Logs delivery for Step Functions (logs:CreateLogDelivery and related) takes no resource-level permissions.');
    Validations.of(waiter).acknowledge({
      id: 'AwsSolutions::AwsSolutions-SF2',
      reason: "The provider framework's waiter state machine offers no X-Ray tracing option; it runs only while the fleet is deleted, and its executions are logged (level ALL).",
    });
  }
}
