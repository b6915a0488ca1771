import { realSleep, type RequestPacer, type Sleep } from './pacing';

/**
 * Every AWS call of the control plane goes through `AwsCaller.send`: paced to the action's
 * bucket, bounded in time, and retried with backoff where that is safe.
 *
 * - Throttling is always retried: a throttled request was not executed.
 * - A timeout, a network error or a 5xx leaves the outcome unknown. Such a call is retried
 *   only when the policy says it is idempotent; otherwise `UnknownOutcomeError` is thrown and
 *   the caller resolves the outcome by observing state (StartInstances by DescribeInstances,
 *   the claim by reading the parameter back). This is also why the production clients are
 *   built with `maxAttempts: 1`: an SDK-level retry of a StartInstances that did execute
 *   answers "previous state: pending", which would read as a lost claim.
 */
export interface CallPolicy {
  readonly timeoutMs: number;
  /** Total attempts, the first included. */
  readonly attempts: number;
  /** Retry unknown outcomes (timeouts, 5xx) too: only for calls that are safe to repeat. */
  readonly idempotent: boolean;
}

// Six attempts with backoff capped at 2 s ride out about 6 s of throttling: enough for
// several containers sharing the account's SSM write rate, well inside a Lambda timeout.
export const READ: CallPolicy = { timeoutMs: 5_000, attempts: 6, idempotent: true };
export const WRITE_IDEMPOTENT: CallPolicy = { timeoutMs: 5_000, attempts: 6, idempotent: true };
export const WRITE_ONCE: CallPolicy = { timeoutMs: 8_000, attempts: 6, idempotent: false };

export class UnknownOutcomeError extends Error {
  constructor(
    readonly action: string,
    cause: unknown,
  ) {
    super(`${action}: outcome unknown (${describeError(cause)})`, { cause });
    this.name = 'UnknownOutcomeError';
  }
}

export class CallTimeoutError extends Error {
  constructor(action: string, ms: number) {
    super(`${action} did not answer within ${ms} ms`);
    this.name = 'TimeoutError';
  }
}

const THROTTLING = new Set([
  'Throttling',
  'ThrottlingException',
  'ThrottledException',
  'RequestLimitExceeded',
  'RequestThrottled',
  'RequestThrottledException',
  'TooManyRequestsException',
  'TooManyUpdates',
  'SlowDown',
  'ProvisionedThroughputExceededException',
]);

// EC2 answers these with a 5xx status ("server" errors in its error code list), yet they are
// definite refusals: nothing was started or launched, and the same request fails the same way.
const DEFINITE_SERVER_REFUSALS = new Set([
  'InsufficientInstanceCapacity',
  'InsufficientHostCapacity',
  'InsufficientReservedInstanceCapacity',
  'InsufficientCapacity',
]);

interface ErrorShape {
  name?: string;
  code?: string;
  $metadata?: { httpStatusCode?: number };
  $retryable?: { throttling?: boolean };
}

export function errorName(error: unknown): string {
  const e = error as ErrorShape | undefined;
  return e?.name ?? e?.code ?? 'Error';
}

export function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

export function isThrottling(error: unknown): boolean {
  const e = error as ErrorShape | undefined;
  return THROTTLING.has(errorName(error)) || e?.$retryable?.throttling === true || e?.$metadata?.httpStatusCode === 429;
}

/** The request may or may not have been executed. */
export function isUnknownOutcome(error: unknown): boolean {
  if (isThrottling(error)) return false;
  const e = error as ErrorShape | undefined;
  const name = errorName(error);
  if (DEFINITE_SERVER_REFUSALS.has(name)) return false;
  if (['TimeoutError', 'AbortError', 'RequestTimeout', 'RequestTimeoutException', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'ECONNREFUSED'].includes(name)) {
    return true;
  }
  const status = e?.$metadata?.httpStatusCode;
  if (status !== undefined && status >= 500) return true;
  return ['InternalError', 'InternalFailure', 'InternalServerError', 'ServiceUnavailable', 'Unavailable'].includes(name);
}

interface Sendable {
  // The SDK's overloads do not narrow well through a generic; the caller names the output type.
  send(command: never, options?: { abortSignal?: AbortSignal }): Promise<unknown>;
}

export interface AwsCallerOptions {
  readonly pacer?: RequestPacer;
  readonly sleep?: Sleep;
  readonly random?: () => number;
  /** Backoff base and cap in ms (full jitter). */
  readonly baseDelayMs?: number;
  readonly maxDelayMs?: number;
  /** Overrides every policy's timeout (tests use a short one to provoke unknown outcomes). */
  readonly timeoutMs?: number;
  /** Called once per request actually sent (the benchmark counts them). */
  readonly onRequest?: (action: string) => void;
}

export function actionOf(command: object): string {
  return command.constructor.name.replace(/Command$/, '');
}

export class AwsCaller {
  private readonly sleep: Sleep;
  private readonly random: () => number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;

  constructor(private readonly options: AwsCallerOptions = {}) {
    this.sleep = options.sleep ?? realSleep;
    this.random = options.random ?? Math.random;
    this.baseDelayMs = options.baseDelayMs ?? 100;
    this.maxDelayMs = options.maxDelayMs ?? 2_000;
  }

  /**
   * Takes a token for `action` now, for a caller that wants to choose what to send only once
   * it may send (scale-up picks its claim candidate after the wait); pass `{ paced: true }`
   * to the `send` that uses it.
   */
  async pace(action: string): Promise<void> {
    await this.options.pacer?.take(action);
  }

  async send<T>(client: object, command: object, policy: CallPolicy, options: { paced?: boolean } = {}): Promise<T> {
    const action = actionOf(command);
    for (let attempt = 1; ; attempt++) {
      if (!(attempt === 1 && options.paced)) await this.options.pacer?.take(action);
      this.options.onRequest?.(action);
      try {
        return (await this.once(client as Sendable, command, action, this.options.timeoutMs ?? policy.timeoutMs)) as T;
      } catch (error) {
        const throttled = isThrottling(error);
        const unknown = !throttled && isUnknownOutcome(error);
        if (attempt >= policy.attempts || !(throttled || (unknown && policy.idempotent))) {
          if (unknown && !policy.idempotent) throw new UnknownOutcomeError(action, error);
          throw error;
        }
        const cap = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (attempt - 1));
        await this.sleep(Math.round(cap * (0.5 + this.random() / 2)));
      }
    }
  }

  private once(client: Sendable, command: object, action: string, timeoutMs: number): Promise<unknown> {
    const controller = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    // The abort signal cancels the HTTP request; the race also bounds a client that ignores
    // it (a test double), so no call can hold an invocation past its budget.
    const timedOut = new CallTimeoutError(action, timeoutMs);
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        controller.abort(timedOut);
        reject(timedOut);
      }, timeoutMs);
    });
    return Promise.race([client.send(command as never, { abortSignal: controller.signal }), timeout])
      .catch((error: unknown) => {
        // A client that rejects with its own AbortError the moment the signal aborts can settle
        // the race first: the timeout is still what happened.
        throw controller.signal.aborted ? timedOut : error;
      })
      .finally(() => clearTimeout(timer));
  }
}

/** Bounds a non-AWS call (a CI provider's HTTP request) in time. */
export async function withTimeout<T>(what: string, ms: number, run: () => Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new CallTimeoutError(what, ms)), ms);
  });
  try {
    return await Promise.race([run(), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `worker` over `items` with at most `limit` in flight, keeping the input order in the
 * result. A worker that throws stops its lane only: the call settles once every lane has,
 * then throws the first error, so nothing is still running when the caller moves on.
 */
export async function mapLimit<T, R>(items: readonly T[], limit: number, worker: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const lanes = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await worker(items[i]!, i);
    }
  });
  const settled = await Promise.allSettled(lanes);
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  return results;
}
