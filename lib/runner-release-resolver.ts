import { Duration } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { LAMBDA_ENV, type RunnerReleaseSources } from '../lambdas/shared/contract';
import { BundledFunction, BundledHandler } from './bundled-function';
import { FUNCTION_MEMORY_MB } from './function-memory';
import { runOnceOnSchedule } from './scheduled-invoke';

/**
 * How often the newest runner release is resolved: hourly reaches a new release within the
 * hour (GitHub's window is 30 days), at one unauthenticated GitHub API request an hour, well
 * inside its 60 per hour per address.
 */
export const RUNNER_RELEASE_INTERVAL = Duration.hours(1);

/** Props of the `RunnerReleaseResolver`. Internal: not part of the public API. */
export interface RunnerReleaseResolverProps {
  /** Environment every fleet function gets (the FleetConfig parameter). */
  readonly environment: Record<string, string>;
  /** ARNs of the release parameters it keeps (one per provider a pool follows); empty for a fleet of pins. */
  readonly releaseParameterArns: string[];
  /** Where it reads the release data. @default - GitHub's and GitLab's public endpoints */
  readonly sources?: RunnerReleaseSources;
  readonly logRetention: logs.RetentionDays;
  readonly prefix: string;
}

/**
 * Resolves the newest runner release of each provider a pool follows on a schedule, and
 * publishes the days GitHub still accepts each GitHub pool's runner (docs/control-plane.md,
 * "Runner updates"). Its own function: it is the only part of the fleet that reads the
 * providers' release data and the only writer of the release parameters.
 */
export class RunnerReleaseResolver extends Construct {
  readonly function: BundledFunction;
  readonly schedule: events.Rule;

  constructor(scope: Construct, id: string, props: RunnerReleaseResolverProps) {
    super(scope, id);
    this.function = new BundledFunction(this, 'Function', {
      handler: BundledHandler.RUNNER_RELEASE,
      description: `Resolves the newest runner releases and watches GitHub's 30-day runner window (${props.prefix})`,
      timeout: Duration.seconds(60),
      memorySize: FUNCTION_MEMORY_MB['runner-release'],
      environment: { ...props.environment, ...(props.sources ? { [LAMBDA_ENV.runnerReleaseSources]: JSON.stringify(props.sources) } : {}) },
      logRetention: props.logRetention,
    });
    if (props.releaseParameterArns.length > 0) {
      this.function.addToRolePolicy(new iam.PolicyStatement({ actions: ['ssm:GetParameter', 'ssm:PutParameter'], resources: props.releaseParameterArns }));
    }
    runOnceOnSchedule(this.function);
    this.schedule = new events.Rule(this, 'Schedule', {
      description: `Runs the runner release resolver of ${props.prefix}`,
      schedule: events.Schedule.rate(RUNNER_RELEASE_INTERVAL),
      targets: [new targets.LambdaFunction(this.function, { retryAttempts: 0 })],
    });
  }
}
