import { StartInstancesCommand, type EC2Client, type StartInstancesCommandOutput } from '@aws-sdk/client-ec2';
import { errorName, UnknownOutcomeError, WRITE_ONCE, type AwsCaller } from '../shared/aws-call';
import { ALL_STATES, describeFleet } from '../shared/instances';
import type { TagKeys } from '../shared/contract';
import type { Logger } from '../shared/log';

/**
 * - started: StartInstances answered previous state "stopped" (or, after an unknown outcome,
 *   the instance is now pending/running while our claim holds it).
 * - lost: the previous state was not "stopped": the instance was already running, so it is
 *   someone else's (for example one that consumed and deleted its config long ago).
 * - failed: EC2 refused this instance, or the outcome could not be resolved.
 */
export type StartOutcome = 'started' | 'lost' | 'failed';

export interface StartDeps {
  readonly aws: AwsCaller;
  readonly ec2: EC2Client;
  readonly keys: TagKeys;
  readonly log: Logger;
}

/**
 * Starts many instances in one StartInstances call (it takes many ids; the bucket is
 * 5 requests, refilling 2/s). A call that EC2 refuses as a whole (one bad instance fails
 * the request: IncorrectInstanceState, InsufficientInstanceCapacity, ...) is bisected, so
 * only the failing instance's job goes elsewhere. Throttling is retried inside `AwsCaller`.
 */
export async function startInstances(deps: StartDeps, ids: readonly string[]): Promise<Map<string, StartOutcome>> {
  const outcomes = new Map<string, StartOutcome>();
  await startSplitting(deps, ids, outcomes);
  return outcomes;
}

/** `retryUnknown`: an unknown outcome may be retried once; the retry itself (false) is not retried again. */
async function startSplitting(deps: StartDeps, ids: readonly string[], outcomes: Map<string, StartOutcome>, retryUnknown = true): Promise<void> {
  if (ids.length === 0) return;
  try {
    const out = await deps.aws.send<StartInstancesCommandOutput>(deps.ec2, new StartInstancesCommand({ InstanceIds: [...ids] }), WRITE_ONCE);
    for (const s of out.StartingInstances ?? []) {
      if (s.InstanceId && ids.includes(s.InstanceId)) outcomes.set(s.InstanceId, startedBy(s.PreviousState?.Name, !retryUnknown) ? 'started' : 'lost');
    }
    for (const id of ids) if (!outcomes.has(id)) outcomes.set(id, 'failed');
  } catch (error) {
    if (error instanceof UnknownOutcomeError) {
      await resolveUnknown(deps, ids, outcomes, retryUnknown);
      return;
    }
    if (ids.length === 1) {
      deps.log.warn('StartInstances refused the instance', { instanceId: ids[0], error: errorName(error) });
      outcomes.set(ids[0]!, 'failed');
      return;
    }
    deps.log.warn('StartInstances refused the batch, splitting it', { instances: ids.length, error: errorName(error) });
    const half = Math.ceil(ids.length / 2);
    await startSplitting(deps, ids.slice(0, half), outcomes, retryUnknown);
    await startSplitting(deps, ids.slice(half), outcomes, retryUnknown);
  }
}

/**
 * Ours when the instance was stopped; on the retry after an unknown outcome also when it was
 * already pending or running: our first start landed after the describe saw it stopped (the
 * claim keeps everyone else from starting it), so it is not someone else's.
 */
function startedBy(previous: string | undefined, retryAfterUnknown: boolean): boolean {
  return previous === 'stopped' || (retryAfterUnknown && (previous === 'pending' || previous === 'running'));
}

/**
 * A start whose answer never came: describe the instances before deciding. Pending or
 * running means our start executed (the claim, verified on a stopped instance, keeps
 * everyone else from starting it); stopped means it did not, and it is retried once, split
 * like a first start if EC2 refuses it; anything else, or no answer, is a failure that the
 * caller rolls back.
 */
async function resolveUnknown(deps: StartDeps, ids: readonly string[], outcomes: Map<string, StartOutcome>, retryUnknown: boolean): Promise<void> {
  let observed;
  try {
    observed = await describeFleet(deps.aws, deps.ec2, deps.keys, { instanceIds: ids, states: ALL_STATES });
  } catch (error) {
    deps.log.error('StartInstances outcome unknown and DescribeInstances failed', { instances: ids.length, error: errorName(error) });
    for (const id of ids) outcomes.set(id, 'failed');
    return;
  }
  const state = new Map(observed.map((i) => [i.id, i.state]));
  const retry: string[] = [];
  for (const id of ids) {
    const s = state.get(id);
    if (s === 'pending' || s === 'running') outcomes.set(id, 'started');
    else if (s === 'stopped' && retryUnknown) retry.push(id);
    else outcomes.set(id, 'failed');
  }
  deps.log.warn('StartInstances outcome unknown, resolved by describing', { started: ids.length - retry.length, retry: retry.length });
  if (retry.length > 0) await startSplitting(deps, retry, outcomes, false);
}
