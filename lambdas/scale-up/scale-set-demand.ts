import { SCALE_SET_RECENT_START_MS, type PoolConfig, type ScaleSetStartedRunner, type TagKeys } from '../shared/contract';
import type { ObservedInstance } from '../shared/instances';
import { activationTime, reportedStart } from '../shared/job-report';
import { classify } from '../pool/classify';

/**
 * The scale-set demand, pure (docs/scale-set.md, "Capacity"). The target is the one of the
 * client's example autoscaler (`actions/scaleset` examples/dockerscaleset/scaler.go
 * `HandleDesiredRunnerCount`: `minRunners + count` against its idle plus busy runners, where
 * `count` is the statistics' `TotalAssignedJobs` as listener/listener.go `handleMessage`
 * passes it). That comparison with idle plus busy runners is what gives `TotalAssignedJobs` its
 * meaning here: the jobs GitHub assigned to the scale set and not yet completed, running ones
 * included (types.go only declares the field). So it is compared with every runner the pool
 * has for the scale set that can still take or is running a job: starting, idle or busy; a
 * finished runner (its job completed) no longer is one, as the example's `markDone` removes it
 * from its count. The pool keeps no minimum of idle runners here: its warm pool is the parked
 * instances.
 */

/** The pool's runners as observed: what counts against the assigned jobs, and what still holds a place. */
export interface ScaleSetObserved {
  /**
   * Activated instances pending or running whose job has not completed (starting, idle or busy
   * runners), and the runners recent demands started that the observation does not show yet.
   */
  readonly runners: number;
  /**
   * Activated instances stopping, or whose job completed: their runner ended, but they count
   * against `maxRunners` until gone (as decide.ts counts them).
   */
  readonly ending: number;
}

/**
 * `recentlyStarted` (the listener's `ScaleSetDemand.recentlyStarted`): each runner started
 * less than `SCALE_SET_RECENT_START_MS` ago that the observation does not show as an active
 * runner of the pool (missing, or still parked or priming: EC2's reads lag its writes) counts
 * as a runner. One observed gone (shutting down, terminated) counts for nothing: it ended.
 */
export function scaleSetObserved(instances: readonly ObservedInstance[], pool: string, keys: TagKeys, recentlyStarted: readonly ScaleSetStartedRunner[] = [], now = new Date()): ScaleSetObserved {
  let runners = 0;
  let ending = 0;
  const seen = new Map(instances.map((i) => [i.id, i]));
  const counted = new Set<string>();
  for (const i of instances) {
    if (i.tags.get(keys.pool) !== pool || classify(i, keys, false) !== 'active') continue;
    counted.add(i.id);
    if (i.state === 'stopping' || ((i.state === 'pending' || i.state === 'running') && jobCompleted(i, keys, now))) ending++;
    else if (i.state === 'pending' || i.state === 'running') runners++;
  }
  for (const r of new Map(recentlyStarted.map((x) => [x.instanceId, x])).values()) {
    const age = now.getTime() - Date.parse(r.startedAt);
    if (!(age >= 0 && age < SCALE_SET_RECENT_START_MS) || counted.has(r.instanceId)) continue;
    const i = seen.get(r.instanceId);
    if (i !== undefined && classify(i, keys, false) === 'gone') continue;
    runners++;
  }
  return { runners, ending };
}

/**
 * Whether the runner's job completed: the listener marks a job-completed event as `idleSince`
 * (scale-set-listener jobs.ts), after the job's start. A scale-set runner is ephemeral (one job),
 * so it takes no other job. An `idleSince` from before the job started (or with no job reported)
 * is a sweep's idle reading of a runner that may still take one: it stays a runner.
 */
function jobCompleted(i: ObservedInstance, keys: TagKeys, now: Date): boolean {
  const since = Date.parse(i.tags.get(keys.idleSince) ?? '');
  if (!Number.isFinite(since)) return false;
  const started = reportedStart(i, keys, activationTime(i, keys), now);
  return started !== undefined && since >= started;
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
