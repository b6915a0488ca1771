import type { EC2Client } from '@aws-sdk/client-ec2';
import { errorName, type AwsCaller } from '../shared/aws-call';
import type { TagKeys } from '../shared/contract';
import { describeFleet, isActivated, type ObservedInstance } from '../shared/instances';
import type { Logger } from '../shared/log';
import { parkingNow, type Terminate } from './sweep';

/**
 * Whether an instance planned for termination, observed again, is still the activation the
 * sweep read (R3): activated with the same `activated-at`, and not parking for it. A reusable
 * instance can park and be claimed again between the sweep's reading and its action; the rules
 * then speak of an activation that is over, and must not end the next one.
 */
export function sameActivation(planned: ObservedInstance, fresh: ObservedInstance | undefined, keys: TagKeys, now: Date): boolean {
  if (!fresh || !isActivated(fresh, keys)) return false;
  return fresh.tags.get(keys.activatedAt) === planned.tags.get(keys.activatedAt) && !parkingNow(fresh, keys, now);
}

/**
 * The planned terminations whose instances still hold the activation the sweep read, by one
 * DescribeInstances of them just before the action. Only reusable instances can change so:
 * the others are kept as planned without a call. When the read fails the reusable ones wait
 * for the next sweep: unknown is not "unchanged".
 */
export async function stillSameActivation(
  aws: AwsCaller,
  ec2: EC2Client,
  keys: TagKeys,
  planned: readonly Terminate[],
  reusable: (instance: ObservedInstance) => boolean,
  now: Date,
  log: Logger,
): Promise<Terminate[]> {
  const check = planned.filter((t) => reusable(t.instance));
  if (check.length === 0) return [...planned];
  let fresh: Map<string, ObservedInstance>;
  try {
    fresh = new Map((await describeFleet(aws, ec2, keys, { instanceIds: check.map((t) => t.instance.id) })).map((i) => [i.id, i]));
  } catch (error) {
    log.warn('reading reusable instances again failed; keeping them for the next sweep', { instances: check.length, error: errorName(error) });
    return planned.filter((t) => !reusable(t.instance));
  }
  return planned.filter((t) => {
    if (!reusable(t.instance) || sameActivation(t.instance, fresh.get(t.instance.id), keys, now)) return true;
    log.info('keeping the instance: it is no longer the activation the sweep read (parked, parking or activated again)', { instanceId: t.instance.id, reason: t.reason });
    return false;
  });
}
