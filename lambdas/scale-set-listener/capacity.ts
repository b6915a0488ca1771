import { InvokeCommand, type InvokeCommandOutput, type LambdaClient } from '@aws-sdk/client-lambda';
import { isThrottling, UnknownOutcomeError, type AwsCaller, type CallPolicy } from '../shared/aws-call';
import { SCALE_UP_TIMEOUT_SECONDS, type ScaleSetDemand, type ScaleSetDemandResult, type ScaleSetStartedRunner } from '../shared/contract';

/**
 * Scale-up serves a demand in one synchronous invocation: as long as a burst's warm
 * activations and cold launches take, bounded by scale-up's own timeout
 * (`SCALE_UP_TIMEOUT_SECONDS`). The wait is longer than that timeout (plus a cold start's
 * margin), so an answer that does not come means scale-up has ended, not that it still runs.
 * Sent once: a lost answer is not resent beside a scale-up that may still run (two at once
 * could both launch cold for one shortfall); the message stays unacknowledged, the poller keeps
 * the lease until scale-up's timeout has passed (poll.ts), and the next reading asks again,
 * recomputed from what the first one started.
 */
export const CAPACITY_CALL: CallPolicy = { timeoutMs: SCALE_UP_TIMEOUT_SECONDS * 1000 + 10_000, attempts: 1, idempotent: false };

export class ScaleUpInvokeError extends Error {
  constructor(detail: string) {
    super(`scale-up did not serve the demand: ${detail}`);
    this.name = 'ScaleUpInvokeError';
  }
}

/**
 * Whether a failed demand surely never ran scale-up: Lambda refused the invocation (throttled, or
 * any other 4xx but 410: denied, not found, a bad request). Anything else (a lost answer, a function
 * error, an answer not understood) may have started runners that went unreported.
 */
export function demandRefused(error: unknown): boolean {
  if (error instanceof UnknownOutcomeError || error instanceof ScaleUpInvokeError) return false;
  const status = (error as { $metadata?: { httpStatusCode?: number } } | undefined)?.$metadata?.httpStatusCode;
  // 410 (EFSIOException) is the one 4xx Invoke documents for a function already running.
  return isThrottling(error) || (status !== undefined && status >= 400 && status < 500 && status !== 410);
}

/** Invokes scale-up with `demand` and returns its `ScaleSetDemandResult`; throws on any other answer. */
export async function requestCapacity(aws: AwsCaller, lambda: LambdaClient, functionName: string, demand: ScaleSetDemand): Promise<ScaleSetDemandResult> {
  const out = await aws.send<InvokeCommandOutput>(
    lambda,
    new InvokeCommand({ FunctionName: functionName, InvocationType: 'RequestResponse', Payload: new TextEncoder().encode(JSON.stringify(demand)) }),
    CAPACITY_CALL,
  );
  const text = out.Payload ? new TextDecoder().decode(out.Payload) : '';
  if (out.FunctionError) throw new ScaleUpInvokeError(`${out.FunctionError}: ${text.slice(0, 200)}`);
  let result: Partial<ScaleSetDemandResult>;
  try {
    result = JSON.parse(text) as Partial<ScaleSetDemandResult>;
  } catch {
    throw new ScaleUpInvokeError('the answer is not JSON');
  }
  if (![result.observed, result.started, result.unserved].every((n) => Number.isInteger(n) && n! >= 0)) throw new ScaleUpInvokeError('the answer is not a ScaleSetDemandResult');
  const runners = result.startedRunners ?? [];
  if (!Array.isArray(runners) || !runners.every(isStartedRunner)) throw new ScaleUpInvokeError('the answer\'s startedRunners are not runners');
  return { observed: result.observed!, started: result.started!, unserved: result.unserved!, startedRunners: runners };
}

function isStartedRunner(r: unknown): r is ScaleSetStartedRunner {
  const x = r as Partial<ScaleSetStartedRunner> | null;
  return typeof x?.instanceId === 'string' && typeof x.startedAt === 'string' && Number.isFinite(Date.parse(x.startedAt));
}
