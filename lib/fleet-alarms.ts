import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { METRIC_NAMES } from '../lambdas/shared/contract';

/** The period of the fleet's alarms on metrics of the control plane: five minutes, the reconciler's and scale-down's default interval. */
export const ALARM_PERIOD = Duration.minutes(5);

/** One alarm of the fleet: fires at or above `threshold` (or as `comparison` says); no data is not a breach. */
export interface FleetAlarmProps {
  /** What fired it, and a link to docs/operations.md saying what to do. */
  readonly description: string;
  readonly metric: cloudwatch.IMetric;
  readonly threshold: number;
  readonly evaluationPeriods: number;
  /** Breaching periods of the last `evaluationPeriods` that fire it. @default - all of them */
  readonly datapointsToAlarm?: number;
  /** How the metric is compared with `threshold`: `LESS_THAN_OR_EQUAL_TO_THRESHOLD` for a metric that is bad when low (days left, say). @default GREATER_THAN_OR_EQUAL_TO_THRESHOLD */
  readonly comparison?: cloudwatch.ComparisonOperator;
}

/**
 * Every alarm of the fleet is made here (`GitHubAppsRateLimitLow` aside, for now), so they
 * share their treatment of missing data: a metric the Lambdas publish only when something happens (a refusal, a
 * lost delivery) has no data in a quiet period, which is not a breach. Made in `scope` (the
 * fleet construct) so an alarm's logical id, and so its history in CloudWatch, stays where it was.
 */
export function fleetAlarm(scope: Construct, id: string, props: FleetAlarmProps): cloudwatch.Alarm {
  return new cloudwatch.Alarm(scope, id, {
    alarmDescription: props.description,
    metric: props.metric,
    threshold: props.threshold,
    evaluationPeriods: props.evaluationPeriods,
    ...(props.datapointsToAlarm === undefined ? {} : { datapointsToAlarm: props.datapointsToAlarm }),
    comparisonOperator: props.comparison ?? cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  });
}

/** A control-plane function whose failed invocations page. */
export interface WatchedFunction {
  /** The alarm's construct id is `<id>ErrorAlarm` (`ScaleUpErrorAlarm` keeps the id it always had). */
  readonly id: string;
  readonly fn: lambda.IFunction;
  /** Its part in the fleet, for the description ("The pool Lambda ..."). */
  readonly role: string;
  /** The docs/operations.md anchor that says what to do. */
  readonly anchor: string;
  /**
   * The schedule of a scheduled function: its alarm fires on two failed periods in a row, each
   * at least one run long, since its next run repairs what one failed run left. A function
   * that serves deliveries or jobs (webhook, scale-up) fires on one failed invocation.
   * @default - not scheduled
   */
  readonly interval?: Duration;
}

/**
 * One alarm per function on Lambda's `Errors` (invocations that threw or timed out). Lambda
 * publishes it per `FunctionName`, so the alarm's dimension is the function's name token:
 * the one part that can be wrong, and that test/lib/fleet-alarms.test.ts checks.
 */
export function functionErrorAlarms(scope: Construct, functions: readonly WatchedFunction[]): cloudwatch.Alarm[] {
  return functions.map(({ id, fn, role, anchor, interval }) => {
    const period = interval === undefined ? ALARM_PERIOD : Duration.seconds(Math.max(interval.toSeconds(), ALARM_PERIOD.toSeconds()));
    const periods = interval === undefined ? 1 : 2;
    return fleetAlarm(scope, `${id}ErrorAlarm`, {
      description:
        `The ${role} Lambda failed invocations${periods > 1 ? ` in ${periods} periods of ${period.toMinutes()} minutes in a row` : ''}. ` +
        `Why: its log group's lines at level "error". What to do: docs/operations.md#${anchor}`,
      metric: fn.metricErrors({ period, statistic: 'Sum' }),
      threshold: 1,
      evaluationPeriods: periods,
    });
  });
}

/**
 * The webhook's own alarms: deliveries refused for their signature or token, invocations
 * Lambda throttled (each one a delivery answered 429, left to the reconciler), and failures:
 * the requests it answered 5xx (`WebhookFailed`: it catches what it can, so a webhook that
 * cannot read its secret or reach the queue throws nothing) plus Lambda's `Errors` of it (a
 * crash, a timeout), a missing term counting as 0 in CloudWatch's arithmetic. Made only when
 * something can reach the webhook (not for `WebhookExposure.none()`).
 * `WebhookRefused` fires on one refusal in five minutes: a wrong secret refuses every delivery,
 * so the first job after a rotation gone wrong pages instead of waiting for the reconciler's
 * catch-up; requests with neither a signature nor the provider's event header (scanners of the
 * public URL) count in `WebhookUnsigned`, which no alarm watches (lambdas/webhook/refusal.ts).
 */
export function webhookAlarms(scope: Construct, webhook: lambda.IFunction, namespace: string): cloudwatch.Alarm[] {
  return [
    fleetAlarm(scope, 'WebhookRefusedAlarm', {
      description:
        'The webhook refused deliveries for their signature or token (a wrong or missing webhook secret refuses every delivery). ' +
        `Why: Logs Insights on /aws/lambda/${webhook.functionName}: fields @timestamp, route, status, reason | filter message = "delivery rejected" and status = 401 | sort @timestamp desc | limit 20. ` +
        'What to do: docs/operations.md#webhook-refused',
      metric: new cloudwatch.Metric({ namespace, metricName: METRIC_NAMES.webhookRefused, statistic: 'Sum', period: ALARM_PERIOD }),
      threshold: 1,
      evaluationPeriods: 1,
    }),
    fleetAlarm(scope, 'WebhookErrorAlarm', {
      description:
        'The webhook answered deliveries 5xx (WebhookFailed: a secret, the config or the queue unreadable or too slow) or its invocations failed (Lambda Errors). ' +
        'Why: its log group\'s lines at level "error". What to do: docs/operations.md#function-errors',
      metric: new cloudwatch.MathExpression({
        expression: 'failed + errors',
        usingMetrics: {
          failed: new cloudwatch.Metric({ namespace, metricName: METRIC_NAMES.webhookFailed, statistic: 'Sum', period: ALARM_PERIOD }),
          errors: webhook.metricErrors({ period: ALARM_PERIOD, statistic: 'Sum' }),
        },
        period: ALARM_PERIOD,
      }),
      threshold: 1,
      evaluationPeriods: 1,
    }),
    fleetAlarm(scope, 'WebhookThrottleAlarm', {
      description: 'Lambda throttled webhook invocations: each was a delivery answered 429, left to the reconciler. What to do: docs/operations.md#webhook-throttled',
      metric: webhook.metricThrottles({ period: ALARM_PERIOD, statistic: 'Sum' }),
      threshold: 1,
      evaluationPeriods: 1,
    }),
  ];
}

/** Reconciler runs in which lost deliveries must show, of the runs `LOST_DELIVERY_WINDOW` counts. */
export const LOST_DELIVERY_RUNS = 3;
/** The runs the lost-delivery alarm looks back over. */
export const LOST_DELIVERY_WINDOW = 6;

/**
 * Lost deliveries (`LostDeliveries`, scale-up: jobs the webhook never queued, served from the
 * reconciler's copy) in 3 of the last 6 reconciler intervals. One lost delivery is normal
 * (GitHub and GitLab document that deliveries can fail or come late, which is why the
 * reconciler exists); lost deliveries run after run mean the webhook does not receive them
 * (the App's or hook's URL wrong, the hook disabled, the endpoint unreachable). A period per
 * reconciler run: a shorter one would hold no data between runs, and never fire in a row.
 */
export function lostDeliveriesAlarm(scope: Construct, namespace: string, reconcileInterval: Duration): cloudwatch.Alarm {
  const period = Duration.seconds(Math.max(reconcileInterval.toSeconds(), ALARM_PERIOD.toSeconds()));
  return fleetAlarm(scope, 'LostDeliveriesAlarm', {
    description:
      `Jobs reached the fleet only through the reconciler (their webhook delivery failed or never came) in ${LOST_DELIVERY_RUNS} of the last ${LOST_DELIVERY_WINDOW} periods of ${period.toMinutes()} minutes. ` +
      'What to do: docs/operations.md#lost-deliveries',
    metric: new cloudwatch.Metric({ namespace, metricName: METRIC_NAMES.lostDeliveries, statistic: 'Sum', period }),
    threshold: 1,
    evaluationPeriods: LOST_DELIVERY_WINDOW,
    datapointsToAlarm: LOST_DELIVERY_RUNS,
  });
}

/** Reconciler runs in a row with failed steps that page. */
export const RECONCILE_FAILURE_RUNS = 2;

/**
 * Failed steps of the reconciler (`ReconcileErrors`: a repository's or project's jobs it could
 * not read, a redelivery refused), in 2 periods of its interval in a row. It catches them per
 * step and goes on, so its Lambda `Errors` stay 0 while it misses jobs; one failed run is
 * repaired by the next, run after run means a credential, a permission or the CI server.
 */
export function reconcileFailuresAlarm(scope: Construct, namespace: string, reconcileInterval: Duration): cloudwatch.Alarm {
  const period = Duration.seconds(Math.max(reconcileInterval.toSeconds(), ALARM_PERIOD.toSeconds()));
  return fleetAlarm(scope, 'ReconcileFailuresAlarm', {
    description:
      `The reconciler's steps failed (reading a repository's or project's jobs, redelivering) in ${RECONCILE_FAILURE_RUNS} periods of ${period.toMinutes()} minutes in a row: jobs whose delivery was lost are not found. ` +
      'Why: its log group\'s lines at level "error". What to do: docs/operations.md#reconcile-failures',
    metric: new cloudwatch.Metric({ namespace, metricName: METRIC_NAMES.reconcileErrors, statistic: 'Sum', period }),
    threshold: 1,
    evaluationPeriods: RECONCILE_FAILURE_RUNS,
  });
}

/** The synth warning's id when the fleet's alarms notify no one (no `alarmActions`). */
export const ALARMS_NOTIFY_NO_ONE = 'cdk-warm-runners:alarms-notify-no-one';
