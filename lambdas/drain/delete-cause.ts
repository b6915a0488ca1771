import { StackStatus } from '@aws-sdk/client-cloudformation';

/**
 * What the drain does with a Delete, decided from the stack's status. CloudFormation sends
 * Delete to a custom resource not only when the stack goes away, but also when an update
 * removes or replaces the resource (a renamed construct, a logical id change): the old
 * resource is deleted in the update's cleanup while the fleet, under the same prefix, keeps
 * serving jobs. Draining then would terminate the live fleet.
 *
 * - `drain`: everything of the stack is being deleted. DELETE_IN_PROGRESS (`cdk destroy`,
 *   a retried delete), and ROLLBACK_IN_PROGRESS: a failed CREATE deletes every resource it
 *   created, the fleet's functions and security group with them, so instances the fleet
 *   launched meanwhile must go first or they are orphaned (and block the security group).
 * - `skip`: an update's own deletes (its cleanup, or the rollback of a failed update): the
 *   stack stays, and so does the fleet its prefix names.
 * - `refuse`: any other status. CloudFormation should not send a Delete then; the request is
 *   failed rather than guessed at (see the handler).
 */
export type DeleteVerdict = { readonly action: 'drain' | 'skip' | 'refuse'; readonly reason: string };

const STACK_GOES_AWAY: ReadonlyMap<string, string> = new Map([
  [StackStatus.DELETE_IN_PROGRESS, 'the stack is being deleted'],
  [StackStatus.ROLLBACK_IN_PROGRESS, "the stack's creation failed and CloudFormation deletes everything it created"],
]);

const STACK_STAYS: ReadonlyMap<string, string> = new Map([
  [StackStatus.UPDATE_IN_PROGRESS, 'an update removes or replaces the drain resource'],
  [StackStatus.UPDATE_COMPLETE_CLEANUP_IN_PROGRESS, "an update's cleanup deletes the replaced or removed drain resource"],
  [StackStatus.UPDATE_ROLLBACK_IN_PROGRESS, 'a failed update is rolled back'],
  [StackStatus.UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS, "a failed update's rollback cleans up"],
  [StackStatus.IMPORT_ROLLBACK_IN_PROGRESS, 'a failed import is rolled back'],
]);

export function deleteVerdict(stackStatus: string): DeleteVerdict {
  const away = STACK_GOES_AWAY.get(stackStatus);
  if (away) return { action: 'drain', reason: `${away} (${stackStatus})` };
  const stays = STACK_STAYS.get(stackStatus);
  if (stays) return { action: 'skip', reason: `${stays} (${stackStatus}); the stack and the fleet under its prefix stay, so nothing is drained` };
  return { action: 'refuse', reason: `the stack is ${stackStatus}, a status in which CloudFormation is not expected to delete the drain` };
}
