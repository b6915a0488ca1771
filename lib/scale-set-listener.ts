import { Duration, Stack } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as ssm from 'aws-cdk-lib/aws-ssm';
import { Construct } from 'constructs';
import { LAMBDA_ENV } from '../lambdas/shared/contract';
import { BundledFunction, BundledHandler } from './bundled-function';
import { FUNCTION_MEMORY_MB } from './function-memory';
import type { JobRecords } from './job-records';
import { acknowledgeWildcard } from './nag';
import { runOnceOnSchedule } from './scheduled-invoke';

/**
 * The listener's timeout. It long-polls until shortly before it, and a new invocation starts
 * every minute; the lease lets one of them poll and the others end at once, so the Lambda
 * time billed is about one poller's wall-clock time whatever the timeout (docs/scale-set.md,
 * "What it costs"). A longer timeout means fewer lease hand-overs (each a session refresh and
 * a cold start); a shorter one a shorter wait for the drain, which waits out the fleet's
 * longest timeout before it terminates anything. Five minutes: the holder stops two minutes
 * before it (the 115 s margin and the 5 s flush reserve), so 20 hand-overs an hour, and a drain about three minutes longer
 * than without a listener. The schedule alone bounds the
 * invocations alive at once to timeout / 1 minute = 5.
 */
export const SCALE_SET_LISTENER_TIMEOUT = Duration.minutes(5);

/** Props of a `ScaleSetListener`. */
export interface ScaleSetListenerProps {
  readonly prefix: string;
  /** Environment every function of the fleet gets (the FleetConfig parameter's name). */
  readonly environment: Record<string, string>;
  readonly configParameter: ssm.IParameter;
  readonly jobRecords: JobRecords;
  /** The function the listener invokes synchronously with a `ScaleSetDemand`. */
  readonly scaleUpFunction: lambda.IFunction;
  /** ARNs of the GitHub App private key parameters (the session and token calls sign with them). */
  readonly appPrivateKeyArns: string[];
  readonly encryptionKey?: kms.IKey;
  readonly logRetention: logs.RetentionDays;
}

/**
 * The fleet's runner scale-set listener (docs/scale-set.md): one function for every
 * scale-set pool, run every minute; per scale set it holds a lease in the fleet's job-record
 * table, keeps the message session open across invocations and asks scale-up for the runners
 * the statistics call for. No always-on compute, no inbound endpoint.
 */
export class ScaleSetListener extends Construct {
  readonly function: BundledFunction;
  readonly schedule: events.Rule;

  constructor(scope: Construct, id: string, props: ScaleSetListenerProps) {
    super(scope, id);
    this.function = new BundledFunction(this, 'Function', {
      handler: BundledHandler.SCALE_SET_LISTENER,
      description: `Long-polls the runner scale sets of ${props.prefix} and asks scale-up for their runners`,
      timeout: SCALE_SET_LISTENER_TIMEOUT,
      memorySize: FUNCTION_MEMORY_MB['scale-set-listener'],
      environment: {
        ...props.environment,
        [LAMBDA_ENV.jobRecordTable]: props.jobRecords.table.tableName,
        [LAMBDA_ENV.scaleUpFunctionName]: props.scaleUpFunction.functionName,
        [LAMBDA_ENV.listenerTimeoutSeconds]: String(SCALE_SET_LISTENER_TIMEOUT.toSeconds()),
      },
      logRetention: props.logRetention,
    });
    runOnceOnSchedule(this.function);
    this.schedule = new events.Rule(this, 'Schedule', {
      description: `Runs the scale-set listener of ${props.prefix}`,
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [new targets.LambdaFunction(this.function, { retryAttempts: 0 })],
    });

    // Least privilege: its lease items only, the App keys, scale-up, the instances' states.
    const fn = this.function;
    props.configParameter.grantRead(fn);
    props.jobRecords.grantScaleSetLeases(fn);
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameter'], resources: props.appPrivateKeyArns }));
    if (props.encryptionKey) {
      fn.addToRolePolicy(
        new iam.PolicyStatement({
          actions: ['kms:Decrypt'],
          resources: [props.encryptionKey.keyArn],
          conditions: { StringEquals: { 'kms:ViaService': `ssm.${Stack.of(this).region}.amazonaws.com` } },
        }),
      );
    }
    // The unqualified ARN only (grantInvoke would add every version, "<arn>:*").
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['lambda:InvokeFunction'], resources: [props.scaleUpFunction.functionArn] }));
    // Which runners are starting, idle or busy, for the capacity it sends with each poll.
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['ec2:DescribeInstances'], resources: ['*'] }));
    acknowledgeWildcard(fn.role!, '*', 'DescribeInstances takes no resource-level permissions.');
  }
}
