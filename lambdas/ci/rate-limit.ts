import type { PoolConfig } from '../shared/contract';
/**
 * When and how long to wait before retrying a CI API call, as pure functions over the
 * response. GitHub answers a rate limit with 403 or 429 and either `retry-after` (seconds)
 * or `x-ratelimit-remaining: 0` plus `x-ratelimit-reset` (Unix seconds)
 * (https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api);
 * GitLab with 429 and `Retry-After` or `RateLimit-Reset` (Unix seconds).
 */
export type HeaderLookup = (name: string) => string | undefined;

export type RetryAdvice =
  | { readonly retry: true; readonly waitMs: number; readonly why: 'rate-limit' | 'server-error' }
  | { readonly retry: false; readonly why: string };

export interface RetryPolicy {
  /** Attempts in all, the first included. */
  readonly maxAttempts: number;
  /** A rate limit that asks for a longer wait than this is not waited for: the call fails. */
  readonly maxWaitMs: number;
  /** Backoff base for 5xx answers (doubled each attempt). */
  readonly backoffMs: number;
  /** 5xx answers are retried only for calls that are safe to repeat (GET, DELETE). */
  readonly retryServerErrors: boolean;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { maxAttempts: 3, maxWaitMs: 10_000, backoffMs: 500, retryServerErrors: true };

/** Milliseconds a rate-limit answer asks us to wait, or undefined when it is not one. */
export function rateLimitWaitMs(status: number, header: HeaderLookup, nowMs: number): number | undefined {
  if (status !== 429 && status !== 403) return undefined;
  const retryAfter = header('retry-after');
  if (retryAfter !== undefined && retryAfter !== '') {
    if (/^\d+$/.test(retryAfter)) return Number(retryAfter) * 1000;
    const at = Date.parse(retryAfter);
    if (!Number.isNaN(at)) return Math.max(0, at - nowMs);
  }
  const reset = header('x-ratelimit-reset') ?? header('ratelimit-reset');
  const remaining = header('x-ratelimit-remaining') ?? header('ratelimit-remaining');
  if (reset !== undefined && /^\d+$/.test(reset) && (status === 429 || remaining === '0')) {
    return Math.max(0, Number(reset) * 1000 - nowMs);
  }
  // A 429 without a hint: GitHub's docs say to wait at least a minute.
  return status === 429 ? 60_000 : undefined;
}

/** Whether to retry after an answer with `status` on attempt number `attempt` (1-based). */
export function adviseRetry(status: number, header: HeaderLookup, nowMs: number, attempt: number, policy: RetryPolicy): RetryAdvice {
  if (attempt >= policy.maxAttempts) return { retry: false, why: `gave up after ${attempt} attempts` };
  const wait = rateLimitWaitMs(status, header, nowMs);
  if (wait !== undefined) {
    if (wait > policy.maxWaitMs) return { retry: false, why: `rate limited for ${Math.ceil(wait / 1000)} s, beyond the ${policy.maxWaitMs / 1000} s bound` };
    // A second past the reset time, so the bucket has refilled when we come back.
    return { retry: true, waitMs: wait + 1000 > policy.maxWaitMs ? wait : wait + 1000, why: 'rate-limit' };
  }
  if (status >= 500 && policy.retryServerErrors) return { retry: true, waitMs: policy.backoffMs * 2 ** (attempt - 1), why: 'server-error' };
  return { retry: false, why: `status ${status}` };
}

export const realSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A fetch whose every call ends within `timeoutMs` (and earlier when the caller's own signal
 * aborts), so no CI call can hang a Lambda until its own timeout.
 */
export function boundedFetch(base: typeof fetch, timeoutMs: number): typeof fetch {
  return (input, init) => {
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = init?.signal ? AbortSignal.any([init.signal, timeout]) : timeout;
    return base(input, { ...init, signal });
  };
}

/** A runner list cut at the provider's page cap: the sweep saw only part of the fleet. */
export interface ListTruncated {
  readonly scope: string;
  readonly pages: number;
}

/** What both CI providers take besides their connection and credentials. */
export interface ProviderTransportOptions {
  readonly prefix: string;
  readonly pools: readonly PoolConfig[];
  /** Called when `listRunners` stops at `maxPages` with more pages left: the sweep sees a partial list. */
  readonly onListTruncated?: (info: ListTruncated) => void;
  readonly fetch?: typeof fetch;
  /** Bound on one HTTP call. */
  readonly timeoutMs?: number;
  readonly retry?: Partial<RetryPolicy>;
  readonly sleep?: (ms: number) => Promise<void>;
  readonly now?: () => number;
  /** Pages of 100 runners read at most by `listRunners`. */
  readonly maxPages?: number;
}
