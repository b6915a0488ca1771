import type { PoolConfig, TagKeys } from '../shared/contract';
import type { ObservedInstance } from '../shared/instances';
import { classify } from '../pool/classify';

/**
 * The scale-set demand, pure (docs/scale-set.md, "Capacity"). The target is the one of the
 * client's example autoscaler (`actions/scaleset` examples/dockerscaleset/scaler.go
 * `HandleDesiredRunnerCount`: `minRunners + count` against its idle plus busy runners, where
 * `count` is the statistics' `TotalAssignedJobs`, listener/listener.go). `TotalAssignedJobs`
 * counts the jobs GitHub assigned to the scale set and not yet completed, running ones
 * included (types.go `RunnerScaleSetStatistic`), so it is compared with every runner the pool
 * has for the scale set: starting, idle or busy. The pool keeps no minimum of idle runners
 * here: its warm pool is the parked instances.
 */

/** The pool's runners as observed: what counts against the assigned jobs, and what still holds a place. */
export interface ScaleSetObserved {
  /** Activated instances pending or running: starting, idle or busy runners. */
  readonly runners: number;
  /** Activated instances stopping: their runner ended, but they count against `maxRunners` until gone (as decide.ts counts them). */
  readonly ending: number;
}

export function scaleSetObserved(instances: readonly ObservedInstance[], pool: string, keys: TagKeys): ScaleSetObserved {
  let runners = 0;
  let ending = 0;
  for (const i of instances) {
    if (i.tags.get(keys.pool) !== pool || classify(i, keys, false) !== 'active') continue;
    if (i.state === 'pending' || i.state === 'running') runners++;
    else if (i.state === 'stopping') ending++;
  }
  return { runners, ending };
}

/**
 * Runners to start: `min(maxRunners, assignedJobs)` less the runners observed, never below
 * zero, and never past `maxRunners` counting the ending ones. A surplus is not stopped here:
 * an idle runner is the scale-down's (its idle rule), and a runner GitHub handed a job must
 * never be.
 */
export function scaleSetShortfall(assignedJobs: number, observed: ScaleSetObserved, pool: Pick<PoolConfig, 'maxRunners'>): number {
  const wanted = Math.min(pool.maxRunners, Math.max(0, Math.floor(assignedJobs)));
  const room = pool.maxRunners - observed.runners - observed.ending;
  return Math.max(0, Math.min(wanted - observed.runners, room));
}
