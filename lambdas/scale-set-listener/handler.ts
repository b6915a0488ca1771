import { randomUUID } from 'node:crypto';
import type { EC2Client } from '@aws-sdk/client-ec2';
import { errorName, type AwsCaller } from '../shared/aws-call';
import { tagKeys, type FleetConfig, type PoolConfig, type ScaleSetApi, type ScaleSetDemand, type ScaleSetDemandResult, type PoolScaleSetConfig } from '../shared/contract';
import { createLogger, Metrics, type Logger, type Sink } from '../shared/log';
import { markJobEvents } from './jobs';
import type { ScaleSetLeases } from './lease';
import { DEMAND_BOUND_MS, pollScaleSet, type PollOutcome } from './poll';

export interface ListenerOptions {
  /** The last poll ends this long before the invocation's deadline: a message in hand is served, acknowledged and the lease released. */
  readonly marginMs: number;
  /**
   * A demand is sent only with this left before the deadline. Default: `DEMAND_BOUND_MS` (80 s),
   * or the margin when that is shorter: the margin is sized to hold a demand at its bound, and a
   * shorter one is a compressed clock (the local sandbox) that scales the bound with it.
   */
  readonly demandBoundMs?: number;
}

/** The deadline is the invocation's end less this: the last log lines and metrics are flushed before Lambda ends it. */
export const LISTENER_DEADLINE_RESERVE_MS = 5_000;

/** The schedule's period (lib/scale-set-listener.ts: every minute); the listener's timeout is a whole number of them. */
export const LISTENER_SCHEDULE_PERIOD_MS = 60_000;

/**
 * The margin keeps the message in hand's demand at its bound (`DEMAND_BOUND_MS`: scale-up's
 * invocation, the acknowledgement and the lease write) inside the invocation. It is measured from
 * the deadline, which lies the reserve before the invocation's end, so margin and reserve
 * together are rounded up to whole schedule periods: with a timeout of whole periods the holder
 * stops, and releases, on the tick that starts the next invocation, which waits for it (poll.ts
 * `takeLease`). With the 5-minute timeout: 2 minutes less the 5 s reserve (115 s), a stop at 180 s.
 */
export const LISTENER_DEFAULTS: ListenerOptions = {
  marginMs: Math.ceil((DEMAND_BOUND_MS + LISTENER_DEADLINE_RESERVE_MS) / LISTENER_SCHEDULE_PERIOD_MS) * LISTENER_SCHEDULE_PERIOD_MS - LISTENER_DEADLINE_RESERVE_MS,
};

export interface ListenerDeps {
  readonly ec2: EC2Client;
  readonly aws: AwsCaller;
  readonly loadConfig: () => Promise<FleetConfig>;
  /** The scale-set client of a pool's scope (`lambdas/scale-set-listener/api.ts`). */
  readonly scaleSetApi: (config: FleetConfig, pool: PoolConfig) => ScaleSetApi;
  readonly leases: ScaleSetLeases;
  /** Scale-up's synchronous invocation with a demand (index.ts: lambda:InvokeFunction). */
  readonly requestCapacity: (demand: ScaleSetDemand) => Promise<ScaleSetDemandResult>;
  readonly now?: () => Date;
  readonly sink?: Sink;
  readonly options?: Partial<ListenerOptions>;
}

/** The Lambda context fields the listener reads. */
export interface ListenerContext {
  readonly awsRequestId?: string;
  getRemainingTimeInMillis?(): number;
}

type ScaleSetPool = PoolConfig & { readonly scaleSet: PoolScaleSetConfig };

/** The fleet's scale-set pools, in FleetConfig order. */
export function scaleSetPools(config: FleetConfig): ScaleSetPool[] {
  return config.pools.filter((p): p is ScaleSetPool => p.provider === 'github' && p.scaleSet !== undefined);
}

/**
 * The scale-set listener Lambda, on an EventBridge schedule (every minute): all scale-set
 * pools of the fleet polled at once, each under its own lease until shortly before the
 * invocation's deadline (poll.ts). One pool's failure is logged and counted
 * (`ScaleSetListenerErrors`, by pool and reason) and never stops another's poll.
 */
export function createListenerHandler(deps: ListenerDeps): (event: unknown, context?: ListenerContext) => Promise<Record<string, PollOutcome['kind']>> {
  const options = { ...LISTENER_DEFAULTS, ...deps.options };
  const now = deps.now ?? (() => new Date());
  return async (_event, context) => {
    const holder = context?.awsRequestId ?? randomUUID();
    const log = createLogger({ fn: 'scale-set-listener', invocation: holder }, deps.sink);
    const config = await deps.loadConfig();
    const metrics = new Metrics(config.metrics.namespace, deps.sink);
    const names = config.metrics.names;
    const keys = tagKeys(config.prefix);
    // Without a Lambda context (a test, a local run) one poll window of a minute.
    const remaining = context?.getRemainingTimeInMillis?.() ?? LISTENER_DEADLINE_RESERVE_MS + options.marginMs + 60_000;
    const deadline = new Date(now().getTime() + remaining - LISTENER_DEADLINE_RESERVE_MS);
    const outcomes: Record<string, PollOutcome['kind']> = {};
    try {
      await Promise.all(
        scaleSetPools(config).map(async (pool) => {
          const l = log.child({ pool: pool.name });
          let outcome: PollOutcome;
          try {
            outcome = await pollScaleSet(
              {
                api: deps.scaleSetApi(config, pool),
                leases: deps.leases,
                holder,
                deadline,
                marginMs: options.marginMs,
                demandBoundMs: options.demandBoundMs ?? Math.min(DEMAND_BOUND_MS, options.marginMs),
                now,
                log: l,
                jobEvents: async (p, events) => {
                  await markJobEvents({ aws: deps.aws, ec2: deps.ec2, config, keys, now, log: l }, p, events);
                },
                requestCapacity: deps.requestCapacity,
                traceId: () => `scale-set-${randomUUID()}`,
              },
              pool,
            );
          } catch (error) {
            outcome = { kind: 'failed', error: errorName(error) };
          }
          outcomes[pool.name] = outcome.kind;
          report(outcome, l, metrics, names.scaleSetListenerErrors, names.scaleSetMessages, pool.name);
        }),
      );
    } finally {
      metrics.flush();
    }
    return outcomes;
  };
}

/**
 * Stops that are no error: a session gone twice is recreated by the next invocation, and a message
 * read too near the window's end for its demand is left for the next holder, which serves it.
 */
const ROUTINE_STOPS = new Set(['session-gone', 'no-time-for-demand']);

function report(o: PollOutcome, log: Logger, metrics: Metrics, errors: string, messages: string, pool: string): void {
  switch (o.kind) {
    case 'polled':
      if (o.messages > 0) metrics.add(messages, { Pool: pool }, o.messages);
      if (o.stopped !== undefined && !ROUTINE_STOPS.has(o.stopped)) metrics.add(errors, { Pool: pool, Reason: o.stopped });
      log.info('scale-set poll ended', { messages: o.messages, demands: o.demands, ...(o.stopped ? { stopped: o.stopped } : {}) });
      return;
    case 'held':
      log.info('another invocation holds the scale-set lease');
      return;
    case 'lease-lost':
      if (o.messages > 0) metrics.add(messages, { Pool: pool }, o.messages);
      metrics.add(errors, { Pool: pool, Reason: 'lease-lost' });
      return;
    case 'no-scale-set':
      log.error('the pool\'s scale set does not exist at GitHub');
      metrics.add(errors, { Pool: pool, Reason: 'no-scale-set' });
      return;
    case 'conflict':
      metrics.add(errors, { Pool: pool, Reason: 'session-conflict' });
      return;
    case 'failed':
      log.error('scale-set poll failed', { error: o.error });
      metrics.add(errors, { Pool: pool, Reason: 'failed' });
      return;
  }
}
