import { randomUUID } from 'node:crypto';
import { instanceArnOf, ssmPaths, tagKeys, type FleetConfig, type PoolConfig, type ScaleSetApi, type ScaleSetDemand, type ScaleSetDemandResult } from '../shared/contract';
import { createLogger, Metrics } from '../shared/log';
import type { StepContext } from './context';
import { SCALE_UP_DEFAULTS, type ScaleUpDeps } from './handler';
import { SCALE_SET_SLOTS_PER_DEMAND, scaleSetSlotReserveMs, serveScaleSetDemand } from './scale-set-serve';

export interface ScaleSetDemandDeps extends ScaleUpDeps {
  /** The scale-set client of a pool's scope (lambdas/scale-set-listener/api.ts `ScaleSetApiFactory`). */
  readonly scaleSetApi: (config: FleetConfig, pool: PoolConfig) => ScaleSetApi;
  /** The most units of a shortfall one demand serves (default `SCALE_SET_SLOTS_PER_DEMAND`). */
  readonly slotsPerDemand?: number;
}

/** The Lambda context fields the demand path reads (as the listener's and the reconciler's do). */
export interface DemandContext {
  getRemainingTimeInMillis?(): number;
}

/**
 * Scale-up's handler for the listener's synchronous invocation (`ScaleSetDemand`): the same
 * clients, options and steps as the queue's handler (handler.ts), without a queue message.
 * Throws when the demand cannot be served at all (an unknown pool, the observation failed):
 * the listener then leaves its message unacknowledged and asks again. With a Lambda context,
 * no slot starts once less than `scaleSetSlotReserveMs` is left of the invocation.
 */
export function createScaleSetDemandHandler(deps: ScaleSetDemandDeps): (demand: ScaleSetDemand, context?: DemandContext) => Promise<ScaleSetDemandResult> {
  const options = { ...SCALE_UP_DEFAULTS, ...deps.options };
  const instanceArn = instanceArnOf(deps.instanceArnPrefix);
  const now = deps.now ?? (() => new Date());
  const reserveMs = scaleSetSlotReserveMs(options.ciTimeoutMs);
  return async (demand, context) => {
    const remaining = context?.getRemainingTimeInMillis?.bind(context);
    const id = randomUUID();
    const log = createLogger({ fn: 'scale-up', invocation: id, demand: 'scale-set' }, deps.sink);
    const config = await deps.loadConfig();
    const metrics = new Metrics(config.metrics.namespace, deps.sink);
    try {
      const pool = config.pools.find((p) => p.name === demand.pool);
      const github = deps.providers(config).github;
      if (!pool || !github) throw new Error(`pool "${demand.pool}" is not a GitHub pool of this fleet`);
      const step: StepContext = {
        ec2: deps.ec2,
        ssm: deps.ssm,
        aws: deps.aws,
        config,
        keys: tagKeys(config.prefix),
        paths: ssmPaths(config.prefix),
        instanceArn,
        metrics,
        log,
        now,
        ciTimeoutMs: options.ciTimeoutMs,
        batching: options.batching,
      };
      const result = await serveScaleSetDemand(
        step,
        {
          api: deps.scaleSetApi(config, pool),
          github,
          ...(deps.launchTickets ? { launchTickets: deps.launchTickets } : {}),
          warm: options.warm,
          coldConcurrency: options.coldConcurrency,
          salt: id,
          slots: deps.slotsPerDemand ?? SCALE_SET_SLOTS_PER_DEMAND,
          ...(remaining ? { outOfTime: () => remaining() < reserveMs } : {}),
        },
        demand,
      );
      log.info('scale-set demand served', {
        pool: demand.pool,
        traceId: demand.traceId,
        assignedJobs: demand.assignedJobs,
        observed: result.observed,
        started: result.started,
        unserved: result.unserved,
        recentlyStarted: (demand.recentlyStarted ?? []).map((r) => r.instanceId),
      });
      return result;
    } catch (error) {
      log.error('serving the scale-set demand failed', { pool: demand.pool, traceId: demand.traceId, error: (error as Error).message });
      throw error;
    } finally {
      metrics.flush();
    }
  };
}
