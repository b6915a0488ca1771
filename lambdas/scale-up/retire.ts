import { TerminateInstancesCommand } from '@aws-sdk/client-ec2';
import { errorName, WRITE_IDEMPOTENT } from '../shared/aws-call';
import { ALL_STATES, describeFleet } from '../shared/instances';
import type { Logger } from '../shared/log';
import type { StepContext } from './context';

/**
 * What a rollback does with its claim once it knows whether our activation tags are gone:
 * - `release`: nothing of ours is left on the instance; delete the parameter (claimable again at once);
 * - `retire`: our tags stay on an instance we hold: a stopped standby carrying them looks
 *   activated to everyone (never claimed, never started), so terminate it and release the
 *   claim after; the pool refills;
 * - `release-foreign`: our tags stay on an instance someone else started (`start-lost`):
 *   never terminate another owner's instance; the claim protects nothing there, so it goes
 *   (the sweep removes the tags' effects), and the rollback counts as incomplete.
 */
export type ReleasePlan = 'release' | 'retire' | 'release-foreign';

export function planRelease(tagsLeft: boolean, claimed: boolean, reason: string): ReleasePlan {
  if (!tagsLeft) return 'release';
  return claimed && reason !== 'start-lost' ? 'retire' : 'release-foreign';
}

/** States in which a terminated instance can no longer be started or claimed. */
const RETIRED_STATES = new Set(['shutting-down', 'terminated']);

/** Whether an observation (undefined: the instance is gone) shows the instance retired. */
export function isRetired(state: string | undefined): boolean {
  return state === undefined || RETIRED_STATES.has(state);
}

/**
 * Terminates one instance of ours; true once it is on its way out. TerminateInstances is
 * safe to repeat (the caller retries a lost answer); when it still gives no answer, or an
 * error, the instance's state settles it: a call that landed shows shutting-down or
 * terminated. Never throws.
 */
export async function retireInstance(ctx: StepContext, instanceId: string, log: Logger): Promise<boolean> {
  try {
    await ctx.aws.send(ctx.ec2, new TerminateInstancesCommand({ InstanceIds: [instanceId] }), WRITE_IDEMPOTENT);
    return true;
  } catch (error) {
    log.warn('terminating the instance gave no answer or failed; looking at its state', { error: errorName(error) });
  }
  try {
    const [seen] = await describeFleet(ctx.aws, ctx.ec2, ctx.keys, { instanceIds: [instanceId], states: ALL_STATES });
    return isRetired(seen?.state);
  } catch (error) {
    log.error('terminating the instance failed and its state is unreadable', { error: errorName(error) });
    return false;
  }
}
