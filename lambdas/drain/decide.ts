import type { Provider, RunnerSummary } from '../shared/contract';
import type { ObservedInstance } from '../shared/instances';

/** A provider's runners as listed (`truncated`: stopped at the page cap, more may exist), or why not. */
export type RunnerList = { readonly runners: readonly RunnerSummary[]; readonly truncated?: boolean } | { readonly unknown: string };

/**
 * What one drain poll observed. A provider whose runners could not be listed is `unknown`
 * (with the error), never empty: the drain is complete only when every list was read empty.
 */
export interface DrainObservation {
  /** The fleet's instances in every state but terminated (shutting-down included: not gone yet). */
  readonly instances: readonly ObservedInstance[];
  /** Names of the fleet's run-time parameters (runner configs, pool state). */
  readonly parameters: readonly string[];
  readonly runners: ReadonlyMap<Provider, RunnerList>;
  /** Event source mappings and schedules not yet observed disabled (or not yet read). */
  readonly scalingNotStopped: readonly string[];
  /** Time since scaling was stopped (the drain's start). */
  readonly elapsedMs: number;
}

export interface DrainSettings {
  /**
   * How long after scaling stopped an invocation that started before may still launch (the
   * longest timeout of the fleet's functions): the drain does not finish before it has passed.
   */
  readonly quietMs: number;
  /** When the drain gives up and fails the delete (below the provider's total timeout). */
  readonly deadlineMs: number;
}

export interface DrainStep {
  /** Live instances (pending, running, stopping, stopped) to terminate. */
  readonly terminate: readonly ObservedInstance[];
  /** Spot requests to cancel first: a persistent request relaunches a terminated instance. */
  readonly cancelSpotRequests: readonly string[];
  readonly deleteParameters: readonly string[];
  readonly deregister: readonly { readonly provider: Provider; readonly runnerId: string }[];
  /** Nothing of the fleet is left, and nothing can launch any more. */
  readonly complete: boolean;
  /** What is still there, for the log and the failure reason; empty when complete. */
  readonly remaining: readonly string[];
  /** The deadline has passed with something still remaining: fail the delete, naming it. */
  readonly failed: boolean;
}

const LIVE = new Set(['pending', 'running', 'stopping', 'stopped']);
/** How many ids a remaining entry names; the failure reason must stay short (CloudFormation shows it). */
const NAMED = 5;

const listed = (what: string, ids: readonly string[]) => `${ids.length} ${what} (${ids.slice(0, NAMED).join(', ')}${ids.length > NAMED ? ', ...' : ''})`;

/**
 * One drain poll's decision, from what is observed now: every live fleet instance is
 * terminated (parked ones too; spot requests cancelled first), every run-time parameter
 * deleted, every fleet runner deregistered (a busy one is refused by GitHub: it is tried again
 * on the next poll, once its instance is gone). The drain is complete when nothing is left in
 * any state but terminated, every provider's list was read empty, scaling was observed
 * stopped, and the quiet period has passed (an invocation that started before the stop may
 * still launch: the next poll would find and terminate what it launched).
 */
export function decideDrain(observed: DrainObservation, settings: DrainSettings): DrainStep {
  const live = observed.instances.filter((i) => LIVE.has(i.state));
  const deregister: { provider: Provider; runnerId: string }[] = [];
  const remaining: string[] = [];
  if (observed.scalingNotStopped.length > 0) remaining.push(listed('event sources or schedules not yet disabled', observed.scalingNotStopped));
  if (observed.instances.length > 0) remaining.push(listed('instances not terminated', observed.instances.map((i) => `${i.id} ${i.state}`)));
  if (observed.parameters.length > 0) remaining.push(listed('parameters', observed.parameters));
  for (const [provider, list] of observed.runners) {
    if ('unknown' in list) {
      remaining.push(`${provider} runners unknown (listing failed: ${list.unknown})`);
      continue;
    }
    for (const r of list.runners) deregister.push({ provider, runnerId: r.runnerId });
    if (list.truncated) remaining.push(`${provider} runners beyond the list's page cap unknown (${list.runners.length} listed)`);
    else if (list.runners.length > 0) remaining.push(listed(`${provider} runners registered`, list.runners.map((r) => `${r.runnerId} ${r.name}`)));
  }
  const quiet = observed.elapsedMs >= settings.quietMs;
  if (remaining.length === 0 && !quiet) remaining.push(`waiting ${Math.ceil((settings.quietMs - observed.elapsedMs) / 1000)} s for invocations started before the stop`);
  const complete = remaining.length === 0;
  return {
    terminate: live,
    cancelSpotRequests: [...new Set(live.flatMap((i) => (i.spotRequestId ? [i.spotRequestId] : [])))],
    deleteParameters: [...observed.parameters],
    deregister,
    complete,
    remaining,
    failed: !complete && observed.elapsedMs >= settings.deadlineMs,
  };
}
