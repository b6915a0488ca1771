import { DescribeStacksCommand, StackStatus, type CloudFormationClient, type DescribeStacksCommandOutput } from '@aws-sdk/client-cloudformation';
import { errorName, READ, type AwsCaller } from '../shared/aws-call';
import type { Logger } from '../shared/log';

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

/** Who reads the verdict, for its messages and its error type. */
export interface VerdictReader {
  readonly aws: AwsCaller;
  readonly cloudformation: CloudFormationClient;
  readonly log: Logger;
  /** Names the caller in a message: "the drain", "the scale sets' delete". */
  readonly who: string;
  /** What an update would be replacing: "the drain", "the scale-set resource". */
  readonly replaced: string;
  /** Appended to the unreadable-status message (what to do). */
  readonly hint: string;
  readonly fail: (message: string) => Error;
}

/**
 * The Delete's verdict from the stack's status, read once (with the caller's retries). A
 * status that cannot be read fails the Delete before anything is touched: guessing "drain"
 * could end a live fleet, guessing "skip" could leave things behind a deleted stack, while a
 * failed Delete costs a retry at most. Shared by the drain and the scale-set resource.
 */
export async function readDeleteVerdict(r: VerdictReader, stackId: string): Promise<DeleteVerdict> {
  let status: string | undefined;
  try {
    const out = await r.aws.send<DescribeStacksCommandOutput>(r.cloudformation, new DescribeStacksCommand({ StackName: stackId }), READ);
    status = out.Stacks?.[0]?.StackStatus;
  } catch (error) {
    r.log.error('reading the stack status failed', { stackId, error: errorName(error) });
    throw r.fail(
      `${r.who} could not read the status of stack ${stackId} (${errorName(error)}: ${(error as Error).message}), so it cannot tell a stack deletion from an update replacing ${r.replaced}; nothing was touched.${r.hint}`,
    );
  }
  if (status === undefined) throw r.fail(`${r.who} could not read the status of stack ${stackId} (DescribeStacks listed no stack); nothing was touched`);
  return deleteVerdict(status);
}
