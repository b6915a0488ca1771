import { FLEET_DEFAULTS, type PoolConfig, type TagKeys } from './contract';
import type { ObservedInstance } from './instances';

/**
 * The instance's own report that its runner's job started (the `jobStarted` tag the boot
 * script writes on its own instance), read once for the sweep and the retry alike: where the
 * provider's reading is stale or wrong (GitHub's `busy: false` mid-job), the instance knows.
 */

/** When the instance was activated: its `activatedAt` tag, else its launch time. */
export function activationTime(instance: ObservedInstance, keys: TagKeys): number {
  const tagged = Date.parse(instance.tags.get(keys.activatedAt) ?? '');
  return Number.isNaN(tagged) ? instance.launchTime.getTime() : tagged;
}

/** The pool's max job duration in seconds (the default when the pool sets none or is unknown). */
export function maxJobSecondsOf(pool: Pick<PoolConfig, 'maxJobSeconds'> | undefined): number {
  return pool?.maxJobSeconds ?? FLEET_DEFAULTS.maxJobSeconds;
}

/**
 * When the instance's report says its job started, if it reported one for this activation: a
 * time before the activation is the report of an earlier one (a reused instance, contract
 * reuse.ts R3) and is ignored; a time after now or unreadable counts from the activation (the
 * job itself can write the tag, and a far-future time must not keep the instance forever).
 * The instance's clock writes the report, the Lambda's the activation: a report up to
 * `REPORT_SKEW_MS` before the activation still counts (an instance clock slightly behind must
 * not lose its report, which guards against a wrong idle reading); an earlier job's report is
 * older than that, since parking and the next activation take longer.
 */
export const REPORT_SKEW_MS = 60_000;

export function reportedStart(instance: ObservedInstance, keys: TagKeys, activatedAt: number, now: Date): number | undefined {
  const value = instance.tags.get(keys.jobStarted);
  if (value === undefined) return undefined;
  const reported = Date.parse(value);
  if (Number.isFinite(reported) && reported < activatedAt - REPORT_SKEW_MS) return undefined;
  return Number.isFinite(reported) && reported <= now.getTime() ? reported : activatedAt;
}

/** Whether the instance's job-started report still holds: for `maxJobSeconds` from the reported time. */
export function jobReported(instance: ObservedInstance, keys: TagKeys, activatedAt: number, maxJobSeconds: number, now: Date): boolean {
  const started = reportedStart(instance, keys, activatedAt, now);
  return started !== undefined && now.getTime() - started < maxJobSeconds * 1000;
}
