import { Duration } from 'aws-cdk-lib';
import type * as lambda from 'aws-cdk-lib/aws-lambda';

/**
 * How long Lambda keeps an asynchronous (scheduled) event waiting, for example while the
 * function is throttled: Lambda's minimum (its default is 6 hours). The drain's quiet period
 * waits it out on top of the longest function timeout. Internal: not part of the public API.
 */
export const SCHEDULED_MAX_EVENT_AGE = Duration.minutes(1);

/**
 * A scheduled function runs each event once, and never later than SCHEDULED_MAX_EVENT_AGE
 * after the schedule fired. The rule's target has retryAttempts 0, but Lambda's own
 * asynchronous retries (2 by default, up to 6 hours) would still run a pool pass after the
 * drain's quiet period, launching an instance behind a completed drain; the next schedule
 * runs anyway, so a retry buys nothing.
 */
export function runOnceOnSchedule(fn: lambda.Function): void {
  fn.configureAsyncInvoke({ retryAttempts: 0, maxEventAge: SCHEDULED_MAX_EVENT_AGE });
}
