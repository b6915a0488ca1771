import { GetParameterCommand } from '@aws-sdk/client-ssm';
import { decodeStreak, delaySeconds, type PrimeStreak } from '../lambdas/pool/backoff';
import { ssmPaths, tagKeys, WARM_STANDBY_VALUE, type FleetConfig } from '../lambdas/shared/contract';
import type { LocalAwsClients } from './lambdas';
import type { ObservedInstance } from './report';

/**
 * The prime back-off as the local run sees it: the PrimeBackoff metric the pool function
 * emits (its EMF lines, what the alarm watches), the streak the pool stores, and how far the
 * pool's clock must be moved so that a failed prime is judged (the priming timeout, at least
 * a minute) and a held-back probe is due (the back-off delay, up to an hour) without waiting
 * them out. The back-off itself is proven on a simulated clock in test/pool/backoff.test.ts.
 */

/** The PrimeBackoff metric per pool, read from the pool function's EMF lines. */
export class PrimeBackoffWatch {
  /** The value of the last pool run, per pool. */
  readonly last: Record<string, number> = {};
  /** The highest value seen, per pool. */
  readonly max: Record<string, number> = {};

  constructor(private readonly metricName: string) {}

  /** A pool function's log line; anything but an EMF record with the metric is ignored. */
  onLine(line: string): void {
    if (!line.startsWith('{"_aws"')) return;
    let record: Record<string, unknown>;
    try {
      record = JSON.parse(line) as Record<string, unknown>;
    } catch {
      return;
    }
    const value = record[this.metricName];
    const pool = record.Pool;
    if (typeof value !== 'number' || typeof pool !== 'string') return;
    this.last[pool] = value;
    this.max[pool] = Math.max(this.max[pool] ?? 0, value);
  }
}

/** The pool's stored prime streak (undefined when none or not one the pool wrote). */
export async function readPrimeStreak(clients: LocalAwsClients, config: FleetConfig, pool: string): Promise<PrimeStreak | undefined> {
  const text = await clients.ssm.send(new GetParameterCommand({ Name: ssmPaths(config.prefix).primeState(pool) })).then(
    (out) => out.Parameter?.Value,
    (error: Error) => {
      if (error.name === 'ParameterNotFound') return undefined;
      throw error;
    },
  );
  return decodeStreak(text);
}

/**
 * How far (ms) the next pool run's clock must be ahead for the back-off to move on in a pool
 * that is not backing off yet: past the priming timeout of its standbys when every one of
 * them has failed its boot, or to its streak's next probe when none primes and the delay
 * holds launches back. 0 when nothing is to be waited out (a boot still runs). Pure.
 */
export function backoffSkewMs(input: {
  readonly config: FleetConfig;
  readonly instances: readonly ObservedInstance[];
  /** Instances whose boot failed and said so (the player's boot-failed events). */
  readonly failed: ReadonlySet<string>;
  readonly streaks: Readonly<Record<string, PrimeStreak | undefined>>;
  /** Pools whose PrimeBackoff metric is 1 already. */
  readonly backingOff: ReadonlySet<string>;
  readonly now: number;
}): number {
  const keys = tagKeys(input.config.prefix);
  let skew = 0;
  for (const pool of input.config.pools) {
    if (input.backingOff.has(pool.name)) continue;
    const priming = input.instances.filter(
      (i) =>
        (i.state === 'pending' || i.state === 'running') &&
        i.tags[keys.pool] === pool.name &&
        i.tags[keys.warmStandby] === WARM_STANDBY_VALUE &&
        !i.tags[keys.activatedAt] &&
        !i.tags[keys.jobId],
    );
    if (priming.length > 0) {
      if (!priming.every((i) => input.failed.has(i.id))) continue;
      // Each one a second past its timeout, counted from its launch.
      for (const i of priming) skew = Math.max(skew, (i.launchedAt ?? input.now) + pool.warm.primingTimeoutSeconds * 1000 + 1000 - input.now);
      continue;
    }
    const streak = input.streaks[pool.name];
    if (!streak?.lastFailureAt || streak.failures === 0) continue;
    const delay = delaySeconds(streak.failures, { limit: pool.warm.primeFailureLimit, capSeconds: pool.warm.primeBackoffCapSeconds });
    skew = Math.max(skew, Date.parse(streak.lastFailureAt) + delay * 1000 + 1000 - input.now);
  }
  return Math.max(0, skew);
}
