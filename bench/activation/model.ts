/**
 * The throttling model of the activation benchmark: the requests one burst really made
 * (recorded against moto, with their order inside each invocation) are replayed through
 * token buckets, assuming every caller paces itself to the buckets (so nothing is ever
 * throttled and retried) and that a request takes no time of its own. What is left is the
 * time the account's request rates alone impose on the burst.
 */
import type { BucketRate } from '../../lambdas/shared/pacing';

export interface RecordedRequest {
  /** Which invocation (Lambda container) made it. */
  readonly invocation: number;
  readonly action: string;
  /** Real times (ms) it was sent and answered: only their order matters. */
  readonly start: number;
  readonly end: number;
  /** For tracing (BENCH_TRACE): the instance a claim write or tag call was about ('by-id' or 'fleet' for a DescribeInstances), and the error it got. */
  readonly target?: string;
  readonly error?: string;
}

class ModelBucket {
  private tokens: number;
  private at = 0;
  constructor(private readonly rate: BucketRate) {
    this.tokens = rate.capacity;
  }
  /** The earliest time >= `ready` at which a token is free; grants are handed out in call order. */
  grant(ready: number): number {
    let t = Math.max(ready, this.at);
    this.tokens = Math.min(this.rate.capacity, this.tokens + (t - this.at) * this.rate.refillPerSecond);
    if (this.tokens < 1) {
      t += (1 - this.tokens) / this.rate.refillPerSecond;
      this.tokens = 1;
    }
    this.tokens -= 1;
    this.at = t;
    return t;
  }
}

/**
 * Modelled seconds until the last request of the given actions completes. A request may
 * not start before every request of its own invocation that had been answered when it was
 * sent (its causal past); requests of different invocations are independent.
 */
export function modelSeconds(requests: readonly RecordedRequest[], rates: Readonly<Record<string, BucketRate>>, finishing: ReadonlySet<string>): number {
  const buckets = new Map<string, ModelBucket>();
  const ordered = [...requests].sort((a, b) => a.start - b.start);
  const done: { r: RecordedRequest; at: number }[] = [];
  let last = 0;
  for (const r of ordered) {
    let ready = 0;
    for (const d of done) if (d.r.invocation === r.invocation && d.r.end <= r.start) ready = Math.max(ready, d.at);
    const rate = rates[r.action];
    let at = ready;
    if (rate) {
      let b = buckets.get(r.action);
      if (!b) buckets.set(r.action, (b = new ModelBucket(rate)));
      at = b.grant(ready);
    }
    done.push({ r, at });
    if (finishing.has(r.action)) last = Math.max(last, at);
  }
  return last;
}
