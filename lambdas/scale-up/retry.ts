import { runnerIdKey, type RunnerSummary, type TagKeys } from '../shared/contract';
import { isActivated, type ObservedInstance } from '../shared/instances';
import { activationTime, jobReported } from '../shared/job-report';
import type { ServedState } from './job-record';

/**
 * Retrying a job whose runner went elsewhere (issue 11, section 2).
 *
 * A runner registered for a job is not bound to it: GitHub hands a queued job to any idle
 * runner whose labels match, so the runner started for job A may take job B, and A stays
 * queued; a runner may also die before it takes any job. Nothing else would serve A again:
 * its record says it was served, and its instance carries its job id.
 *
 * So, once a job's runner is started, the per-job record says when and where (`markServed`),
 * and scale-up sends itself a check copy of the job, not before `retryAfter` (it does not
 * depend on the reconciler being configured; a reconciled copy of the job does the same check
 * when it finds the record served). The check, in order:
 *   1. the runner was started less than `retryAfter` ago, or the retries are spent: nothing to do;
 *   2. the job is no longer queued at the provider (picked up, finished, cancelled): the
 *      retries stop (logged and counted);
 *   3. a runner of the job's pool is idle or still starting (observed: the fleet's instances
 *      and the provider's runner list): it may yet take the job, so the check comes again later;
 *   4. otherwise the next attempt, if the limit allows, else the dead-letter queue with
 *      `retries-exhausted`. Either is one conditional write on the record naming the served
 *      state the copy saw, so of two copies racing only one starts a runner.
 * The new attempt goes the pool's usual way (decide: capacity wait, warm or cold); the
 * earlier attempts' instances no longer count as serving the job. A runner left idle because
 * its job was taken elsewhere is reclaimed by the idle rule as any other.
 */
export type RetryDue =
  /** The current runner was started less than `retryAfter` ago: it may still take the job. */
  | 'recent'
  /** The retries are spent (the job was dead-lettered): nothing more to do. */
  | 'exhausted'
  /** Ask the provider and observe the runners. */
  | 'due';

export function retryDue(served: ServedState, now: Date, retryAfterSeconds: number): RetryDue {
  if (served.exhausted) return 'exhausted';
  return now.getTime() / 1000 < served.servedAt + retryAfterSeconds ? 'recent' : 'due';
}

/** What to do for a job still queued after its runner's `retryAfter`. */
export type RetryAction =
  /** A runner that could take the job is idle or starting: look again later. */
  | { readonly kind: 'wait'; readonly instanceId: string }
  | { readonly kind: 'retry' }
  | { readonly kind: 'exhaust' };

export function retryAction(served: ServedState, capable: readonly string[], limit: number): RetryAction {
  if (capable.length > 0) return { kind: 'wait', instanceId: capable[0]! };
  return served.attempt >= limit ? { kind: 'exhaust' } : { kind: 'retry' };
}

/**
 * The instances of `pool` whose runner could still take a queued job of the pool:
 * - idle: its runner is online and reported not busy (GitHub reports `busy`);
 * - starting: the instance is pending, or was activated less than `retryAfter` ago and its
 *   runner is not reported busy (not listed yet, offline, or online without a busy flag, as
 *   GitLab's list has none).
 * An instance activated longer ago whose runner is offline or gone died before taking a job;
 * one whose runner is busy took a job (its own or another's). Neither counts, nor does one
 * whose instance reported its job started within `maxJobSeconds` (the sweep's rule, in
 * job-report.ts): its runner is running a job whatever the provider's `busy` reads. Nor does a
 * runner whose scope at the provider excludes the job (`serves`: a GitHub repository runner
 * of another repository); one whose runner id is not tagged yet counts, as it may.
 */
export function capableRunners(
  instances: readonly ObservedInstance[],
  runners: readonly RunnerSummary[],
  pool: string,
  keys: TagKeys,
  now: Date,
  retryAfterSeconds: number,
  maxJobSeconds: number,
  serves: (runnerId: string) => boolean = () => true,
): string[] {
  const byId = new Map(runners.map((r) => [runnerIdKey(r.runnerId), r]));
  const capable: string[] = [];
  for (const i of instances) {
    if (i.tags.get(keys.pool) !== pool || !isActivated(i, keys)) continue;
    const runnerId = i.tags.get(keys.runnerId);
    if (runnerId !== undefined && !serves(runnerId)) continue;
    const since = activationTime(i, keys);
    if (jobReported(i, keys, since, maxJobSeconds, now)) continue;
    if (i.state === 'pending') {
      capable.push(i.id);
      continue;
    }
    if (i.state !== 'running') continue;
    const runner = runnerId === undefined ? undefined : byId.get(runnerIdKey(runnerId));
    if (runner?.status === 'online' && runner.busy === false) {
      capable.push(i.id);
      continue;
    }
    if (runner?.busy !== true && now.getTime() - since < retryAfterSeconds * 1000) capable.push(i.id);
  }
  return capable;
}
