import { Duration } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { LAMBDA_ENV } from '../lambdas/shared/contract';
import { BundledFunction, BundledHandler } from './bundled-function';
import { FUNCTION_MEMORY_MB } from './function-memory';
import { runOnceOnSchedule } from './scheduled-invoke';

/** Props of the `Reconciler`. */
export interface ReconcilerProps {
  /** Environment every fleet function gets (the FleetConfig parameter, the jobs queue). */
  readonly environment: Record<string, string>;
  /** The jobs queue the reconciler sends found jobs to. */
  readonly queue: sqs.IQueue;
  /**
   * ARN of the SecureString parameter holding the GitHub App's private key.
   * @default - none: no GitHub connection
   */
  readonly appPrivateKeyArn?: string;
  /**
   * ARNs of the SecureString parameters holding the private keys of the further GitHub Apps
   * (`GitHubConnectionProps.additionalAppIds`): its run-listing calls go to any App.
   * @default - none: one App
   */
  readonly additionalAppPrivateKeyArns?: string[];
  /**
   * ARN of the SecureString parameter holding the GitLab access token.
   * @default - none: no GitLab connection
   */
  readonly gitlabTokenArn?: string;
  /** Retention of the function's log group. */
  readonly logRetention: logs.RetentionDays;
  /**
   * How often the reconciler runs.
   * @default Duration.minutes(5)
   */
  readonly interval?: Duration;
  /**
   * Failed deliveries redelivered (GitHub) or hook events resent (GitLab, 5 at most: its rate limit) per run at most.
   * @default 10
   */
  readonly redeliverLimit?: number;
  /**
   * Job lists of queued or in-progress workflow runs read per run at most.
   * @default 100
   */
  readonly runReadLimit?: number;
  /**
   * Repositories (GitHub) or projects (GitLab) read per run at most; consecutive runs read consecutive windows.
   * @default 50
   */
  readonly repositoriesPerRun?: number;
  /** Description prefix naming the fleet. */
  readonly prefix: string;
}

/**
 * Asks GitHub and GitLab on a schedule for what the webhook missed: redelivers failed
 * deliveries (resends failed hook events) and queues waiting jobs whose delivery never came
 * (docs/control-plane.md, "Reconciler").
 */
export class Reconciler extends Construct {
  readonly function: BundledFunction;
  /** The schedule; a drain disables it, so that nothing new is queued while the fleet empties. */
  readonly schedule: events.Rule;

  constructor(scope: Construct, id: string, props: ReconcilerProps) {
    super(scope, id);
    const interval = props.interval ?? Duration.minutes(5);
    this.function = new BundledFunction(this, 'Function', {
      handler: BundledHandler.RECONCILE,
      description: `Redelivers failed webhook deliveries and queues jobs whose delivery never came (${props.prefix})`,
      // The handler stops starting requests 40 s before this (getRemainingTimeInMillis) and queues per repository.
      timeout: Duration.seconds(120),
      memorySize: FUNCTION_MEMORY_MB.reconcile,
      environment: {
        ...props.environment,
        [LAMBDA_ENV.reconcileOptions]: JSON.stringify({
          github: {
            redeliverLimit: props.redeliverLimit ?? 10,
            runReadLimit: props.runReadLimit ?? 100,
            repositoriesPerRun: props.repositoriesPerRun ?? 50,
            // The run number (now / interval) chooses the window of repositories.
            intervalSeconds: interval.toSeconds(),
          },
          gitlab: {
            resendLimit: props.redeliverLimit ?? 10,
            projectsPerRun: props.repositoriesPerRun ?? 50,
            intervalSeconds: interval.toSeconds(),
          },
        }),
      },
      logRetention: props.logRetention,
    });
    props.queue.grantSendMessages(this.function);
    const secrets = [props.appPrivateKeyArn, ...(props.additionalAppPrivateKeyArns ?? []), props.gitlabTokenArn].filter((arn): arn is string => arn !== undefined);
    if (secrets.length > 0) this.function.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameter'], resources: secrets }));
    runOnceOnSchedule(this.function);
    this.schedule = new events.Rule(this, 'Schedule', {
      description: `Runs the reconciler of ${props.prefix}`,
      schedule: events.Schedule.rate(interval),
      targets: [new targets.LambdaFunction(this.function, { retryAttempts: 0 })],
    });
  }
}
