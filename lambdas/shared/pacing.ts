/**
 * Client-side pacing: a token bucket per API action, so a burst is spread over the
 * account's documented request rates instead of being answered with throttling errors
 * (EC2 "Request throttling", https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html;
 * SSM PutParameter has been reported at 3 TPS on standard throughput). Buckets are per
 * Lambda container, so concurrent containers can still exceed the account bucket: the
 * retries in `aws-call.ts` absorb that; pacing keeps the common case free of them.
 */
export interface BucketRate {
  /** Tokens the bucket holds when full (the burst). */
  readonly capacity: number;
  /** Tokens added per second. */
  readonly refillPerSecond: number;
}

export type Clock = () => number;
export type Sleep = (ms: number) => Promise<void>;

export const realSleep: Sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Documented EC2 request buckets (max/refill per second) and SSM PutParameter's standard rate. */
export const DEFAULT_RATES: Readonly<Record<string, BucketRate>> = {
  RunInstances: { capacity: 5, refillPerSecond: 2 },
  CreateFleet: { capacity: 5, refillPerSecond: 2 },
  StartInstances: { capacity: 5, refillPerSecond: 2 },
  StopInstances: { capacity: 5, refillPerSecond: 2 },
  CreateTags: { capacity: 100, refillPerSecond: 10 },
  DeleteTags: { capacity: 100, refillPerSecond: 10 },
  DescribeInstances: { capacity: 100, refillPerSecond: 20 },
  TerminateInstances: { capacity: 100, refillPerSecond: 5 },
  PutParameter: { capacity: 3, refillPerSecond: 3 },
  DeleteParameter: { capacity: 3, refillPerSecond: 3 },
};

export class TokenBucket {
  private tokens: number;
  private last: number;
  /** Time (clock ms) the last reservation was granted; reservations are handed out in order. */
  constructor(
    readonly rate: BucketRate,
    private readonly clock: Clock,
  ) {
    this.tokens = rate.capacity;
    this.last = clock();
  }

  /** Reserves one token and returns how many ms the caller must wait before using it. */
  reserve(): number {
    const now = this.clock();
    this.tokens = Math.min(this.rate.capacity, this.tokens + ((now - this.last) / 1000) * this.rate.refillPerSecond);
    this.last = now;
    this.tokens -= 1;
    // A negative balance is a queue of reservations: the caller waits until its token exists.
    return this.tokens >= 0 ? 0 : Math.ceil((-this.tokens / this.rate.refillPerSecond) * 1000);
  }
}

/** What `AwsCaller` waits on before each request: resolves once `action` may be sent. */
export interface RequestPacer {
  take(action: string): Promise<void>;
}

/** One bucket per action name; actions without a configured rate pass unpaced. */
export class Pacer implements RequestPacer {
  private readonly buckets = new Map<string, TokenBucket>();
  constructor(
    private readonly rates: Readonly<Record<string, BucketRate>> = DEFAULT_RATES,
    private readonly clock: Clock = Date.now,
    private readonly sleep: Sleep = realSleep,
  ) {}

  async take(action: string): Promise<void> {
    const rate = this.rates[action];
    if (!rate) return;
    let bucket = this.buckets.get(action);
    if (!bucket) {
      bucket = new TokenBucket(rate, this.clock);
      this.buckets.set(action, bucket);
    }
    const wait = bucket.reserve();
    if (wait > 0) await this.sleep(wait);
  }
}
