import { TerminateInstancesCommand, type EC2Client } from '@aws-sdk/client-ec2';
import type { SSMClient } from '@aws-sdk/client-ssm';
import { errorName, withTimeout, WRITE_IDEMPOTENT, type AwsCaller } from '../shared/aws-call';
import { instanceIdOfRunnerName, ssmPaths, tagKeys, type CiProvider, type FleetConfig, type Provider, type RunnerSummary, type SsmPaths, type TagKeys } from '../shared/contract';
import { describeFleet, repositoriesOf, type ObservedInstance } from '../shared/instances';
import { createLogger, Metrics, type Logger, type Sink } from '../shared/log';
import { deleteRunnerConfigs } from '../shared/delete-configs';
import { listRunnerConfigs, type ObservedParameter } from '../shared/parameters';
import { deregisterIdleRunner, logKept } from './pause-first';
import { recordIdleReadings, reportedSinceReading } from './idle-marks';
import { idleStopAll } from './idle-stop';
import { stillSameActivation } from './same-activation';
import { planSweep, SWEEP_DEFAULTS, type DeleteParameter, type DeleteRunner, type SweepOptions, type Terminate } from './sweep';

export interface ScaleDownDeps {
  readonly ec2: EC2Client;
  readonly ssm: SSMClient;
  readonly aws: AwsCaller;
  readonly loadConfig: () => Promise<FleetConfig>;
  readonly providers: (config: FleetConfig) => Partial<Record<Provider, CiProvider>>;
  /**
   * Providers whose last `listRunners` stopped at the page cap (filled by the providers'
   * `onListTruncated`); the handler clears a provider before listing and reads it after.
   */
  readonly truncatedLists?: Set<Provider>;
  readonly now?: () => Date;
  readonly sink?: Sink;
  readonly options?: Partial<SweepOptions> & { readonly ciTimeoutMs?: number };
}

export interface SweepSummary {
  readonly terminated: number;
  readonly parametersDeleted: number;
  readonly runnersDeleted: number;
  /** Idle runners of reusable pools deregistered so that their instances park (idle-stop). */
  readonly idleStopped: number;
}

/**
 * The scale-down Lambda (on a schedule): observe instances, config parameters and the
 * providers' runners, plan with the pure `planSweep`, record its idle readings on the
 * instances (the idle rule needs two, a window apart), then act in batches: one
 * deregistration per runner (before its instance goes), one TerminateInstances per 100
 * instances, one DeleteParameters per 10 parameters (those the plan names and those of the
 * instances just terminated), and idle-stops (reusable pools: idle-stop.ts) one by one, each
 * under its own claim. Every action is logged with its reason and counted.
 */
export function createScaleDownHandler(deps: ScaleDownDeps): () => Promise<SweepSummary> {
  const now = deps.now ?? (() => new Date());
  const options: SweepOptions = { ...SWEEP_DEFAULTS, ...deps.options };
  const ciTimeoutMs = deps.options?.ciTimeoutMs ?? 10_000;
  return async () => {
    const config = await deps.loadConfig();
    const log = createLogger({ fn: 'scale-down' }, deps.sink);
    const metrics = new Metrics(config.metrics.namespace, deps.sink);
    const keys = tagKeys(config.prefix);
    const paths = ssmPaths(config.prefix);
    const providers = deps.providers(config);
    const summary = { terminated: 0, parametersDeleted: 0, runnersDeleted: 0, idleStopped: 0 };
    try {
      const instances = await describeFleet(deps.aws, deps.ec2, keys);
      const parameters = await listRunnerConfigs(deps.aws, deps.ssm, paths);
      const runners = new Map<Provider, RunnerSummary[]>();
      const partial = new Set<Provider>();
      for (const provider of new Set(config.pools.map((p) => p.provider))) {
        const ci = providers[provider];
        if (!ci) continue;
        try {
          deps.truncatedLists?.delete(provider);
          // A reusable pool's repository runners are listed only where the instances name their repositories.
          runners.set(provider, await withTimeout(`${provider} listRunners`, ciTimeoutMs, () => ci.listRunners({ repositories: repositoriesOf(instances, keys) })));
          if (deps.truncatedLists?.has(provider)) partial.add(provider);
        } catch (error) {
          // Unknown is not empty: decide nothing from this provider's runners this time.
          log.warn('listing runners failed; skipping the decisions that need them', { provider, error: errorName(error) });
        }
      }
      const at = now();
      const plan = planSweep(config, keys, instances, parameters, runners, at, options, partial);
      await recordIdleReadings(deps.aws, deps.ec2, keys, plan, at, log);
      const poolOf = (instanceId: string) => instances.find((i) => i.id === instanceId)?.tags.get(keys.pool) ?? 'unknown';
      const count = (pool: string, reason: string) => metrics.add(config.metrics.names.sweeps, { Pool: pool, Reason: reason });

      // A reusable instance may have parked and been claimed again since the reading (R3).
      const reusable = (i: ObservedInstance) => Boolean(config.pools.find((p) => p.name === i.tags.get(keys.pool))?.reuse) || i.tags.has(keys.parking) || i.tags.has(keys.affinity);
      const planned = await stillSameActivation(deps.aws, deps.ec2, keys, plan.terminate, reusable, now(), log);
      const terminate = await deregisterFirst(deps, planned, providers, keys, ciTimeoutMs, log);
      const terminated = await terminateInstances(deps, terminate, keys, log, count);
      summary.terminated = terminated.length;
      summary.parametersDeleted = await deleteConfigs(deps, paths, plan.deleteParameters, parameters, terminated, log, (id, reason) => count(poolOf(id), reason));
      const idleStopContext = { paths, keys, providers, ciTimeoutMs, now, log };
      summary.idleStopped = await idleStopAll(deps, idleStopContext, plan.idleStop, (pool) => metrics.add(config.metrics.names.idleStops, { Pool: pool }));
      summary.runnersDeleted = await deregisterStrays(plan.deleteRunners, providers, ciTimeoutMs, log, (name, reason) => count(poolOf(instanceIdOfRunnerName(config.prefix, name) ?? ''), reason));
    } finally {
      metrics.flush();
    }
    return summary;
  };
}

/**
 * The planned terminations whose runners are deregistered now (or need none). A runner still
 * listed is deregistered first, and its instance terminated only when that succeeded: the
 * deregistration is the lock. Between the list and now the idle runner may have taken a job;
 * GitHub then refuses the deletion (422, runner busy), and once deleted a runner can take no
 * new job. GitLab refuses nothing, so an idle GitLab runner is paused first, then deleted only
 * when GitLab lists no running job of it (`deregisterIdleRunner`). A job-started report that arrived after the first
 * reading still saves its runner.
 */
async function deregisterFirst(
  deps: ScaleDownDeps,
  planned: readonly Terminate[],
  providers: Partial<Record<Provider, CiProvider>>,
  keys: TagKeys,
  ciTimeoutMs: number,
  log: Logger,
): Promise<Terminate[]> {
  const idle = planned.filter((t) => t.reason === 'idle').map((t) => t.instance);
  const reported = await reportedSinceReading(deps.aws, deps.ec2, keys, idle, log);
  const terminate: Terminate[] = [];
  for (const t of planned) {
    const traceId = t.instance.tags.get(keys.traceId);
    if (t.reason === 'idle' && reported.has(t.instance.id)) {
      log.info('keeping the instance: its job-started report changed since the reading', { instanceId: t.instance.id, traceId });
      continue;
    }
    const ci = t.runner ? providers[t.runner.provider] : undefined;
    if (!t.runner || !ci) {
      terminate.push(t);
      continue;
    }
    const runnerId = t.runner.runnerId;
    const fields = { instanceId: t.instance.id, runnerId, reason: t.reason, traceId };
    if (t.reason !== 'idle') {
      try {
        await withTimeout('deleteRunner', ciTimeoutMs, () => ci.deleteRunner(runnerId));
        terminate.push(t);
      } catch (error) {
        log.warn('keeping the instance: its runner could not be deregistered (busy now, or the provider failed)', { ...fields, error: errorName(error) });
      }
      continue;
    }
    const outcome = await deregisterIdleRunner(ci, runnerId, ciTimeoutMs);
    if (outcome.deleted) terminate.push(t);
    else logKept(log, outcome, fields);
  }
  return terminate;
}

/** One TerminateInstances per 100 instances (their runners are deregistered already); the ids terminated. */
async function terminateInstances(deps: ScaleDownDeps, terminate: readonly Terminate[], keys: TagKeys, log: Logger, count: (pool: string, reason: string) => void): Promise<string[]> {
  const terminated: string[] = [];
  for (let i = 0; i < terminate.length; i += 100) {
    const chunk = terminate.slice(i, i + 100);
    try {
      await deps.aws.send(deps.ec2, new TerminateInstancesCommand({ InstanceIds: chunk.map((t) => t.instance.id) }), WRITE_IDEMPOTENT);
    } catch (error) {
      // Their runners are gone already: the next sweep finds them unlisted and retries.
      log.error('terminating instances failed', { instances: chunk.length, error: errorName(error) });
      continue;
    }
    for (const t of chunk) {
      terminated.push(t.instance.id);
      const pool = t.instance.tags.get(keys.pool) ?? 'unknown';
      log.info('terminated', { instanceId: t.instance.id, reason: t.reason, pool, traceId: t.instance.tags.get(keys.traceId), jobId: t.instance.tags.get(keys.jobId) });
      count(pool, t.reason);
    }
  }
  return terminated;
}

/**
 * Deletes the config parameters the plan names (instance gone, stale claim) and, in the same
 * run, those of the instances just terminated: a parameter holds a runner secret, and waiting
 * for the next sweep's "instance-gone" leaves it a minute or more. Returns how many are gone.
 */
async function deleteConfigs(
  deps: ScaleDownDeps,
  paths: SsmPaths,
  planned: readonly DeleteParameter[],
  parameters: readonly ObservedParameter[],
  terminated: readonly string[],
  log: Logger,
  count: (instanceId: string, reason: string) => void,
): Promise<number> {
  const doomed = new Map<string, { instanceId: string; reason: string }>();
  for (const d of planned) doomed.set(d.parameter.name, { instanceId: d.parameter.instanceId, reason: d.reason });
  const observed = new Map(parameters.map((p) => [p.instanceId, p.name]));
  for (const id of terminated) {
    const name = observed.get(id);
    if (name !== undefined && !doomed.has(name)) doomed.set(name, { instanceId: id, reason: 'instance-terminated' });
  }
  if (doomed.size === 0) return 0;
  const outcome = await deleteRunnerConfigs(deps.aws, deps.ssm, paths, [...doomed.keys()], { delete: 'batch', readBack: 'list' });
  if (outcome.kept.size > 0) log.error('deleting config parameters failed; the next sweep retries', { parameters: outcome.kept.size, errors: outcome.errors });
  let deleted = 0;
  for (const [name, d] of doomed) {
    if (!outcome.gone.has(name)) continue;
    log.info('deleted config parameter', { instanceId: d.instanceId, reason: d.reason });
    count(d.instanceId, d.reason);
    deleted++;
  }
  return deleted;
}

/** Deregisters the runners no live instance carries; how many went. A failure is retried by the next sweep. */
async function deregisterStrays(
  planned: readonly DeleteRunner[],
  providers: Partial<Record<Provider, CiProvider>>,
  ciTimeoutMs: number,
  log: Logger,
  count: (runnerName: string, reason: string) => void,
): Promise<number> {
  let deleted = 0;
  for (const d of planned) {
    const ci = providers[d.provider];
    if (!ci) continue;
    try {
      await withTimeout('deleteRunner', ciTimeoutMs, () => ci.deleteRunner(d.runner.runnerId));
      log.info('deregistered runner', { provider: d.provider, runnerId: d.runner.runnerId, name: d.runner.name, reason: d.reason });
      count(d.runner.name, d.reason);
      deleted++;
    } catch (error) {
      log.warn('deregistering a runner failed; the next sweep retries', { runnerId: d.runner.runnerId, error: errorName(error) });
    }
  }
  return deleted;
}
