import { StackStatus } from '@aws-sdk/client-cloudformation';
import { describe, expect, it } from 'vitest';
import { deleteVerdict } from '../../lambdas/drain/delete-cause';

// Every status CloudFormation defines, with what a Delete in it does.
const EXPECTED: Record<StackStatus, 'drain' | 'skip' | 'refuse'> = {
  [StackStatus.DELETE_IN_PROGRESS]: 'drain',
  [StackStatus.ROLLBACK_IN_PROGRESS]: 'drain',
  [StackStatus.UPDATE_IN_PROGRESS]: 'skip',
  [StackStatus.UPDATE_COMPLETE_CLEANUP_IN_PROGRESS]: 'skip',
  [StackStatus.UPDATE_ROLLBACK_IN_PROGRESS]: 'skip',
  [StackStatus.UPDATE_ROLLBACK_COMPLETE_CLEANUP_IN_PROGRESS]: 'skip',
  [StackStatus.IMPORT_ROLLBACK_IN_PROGRESS]: 'skip',
  [StackStatus.CREATE_IN_PROGRESS]: 'refuse',
  [StackStatus.CREATE_COMPLETE]: 'refuse',
  [StackStatus.CREATE_FAILED]: 'refuse',
  [StackStatus.ROLLBACK_COMPLETE]: 'refuse',
  [StackStatus.ROLLBACK_FAILED]: 'refuse',
  [StackStatus.DELETE_COMPLETE]: 'refuse',
  [StackStatus.DELETE_FAILED]: 'refuse',
  [StackStatus.UPDATE_COMPLETE]: 'refuse',
  [StackStatus.UPDATE_FAILED]: 'refuse',
  [StackStatus.UPDATE_ROLLBACK_COMPLETE]: 'refuse',
  [StackStatus.UPDATE_ROLLBACK_FAILED]: 'refuse',
  [StackStatus.REVIEW_IN_PROGRESS]: 'refuse',
  [StackStatus.IMPORT_IN_PROGRESS]: 'refuse',
  [StackStatus.IMPORT_COMPLETE]: 'refuse',
  [StackStatus.IMPORT_ROLLBACK_COMPLETE]: 'refuse',
  [StackStatus.IMPORT_ROLLBACK_FAILED]: 'refuse',
};

describe('deleteVerdict: a Delete drains only when the stack goes away', () => {
  it.each(Object.entries(EXPECTED))('%s: %s', (status, action) => {
    const verdict = deleteVerdict(status);
    expect(verdict.action).toBe(action);
    expect(verdict.reason).toContain(status);
  });

  it('covers every status the SDK knows (a new one must be classified here)', () => {
    expect(Object.keys(EXPECTED).sort()).toEqual(Object.values(StackStatus).sort());
  });

  it('refuses a status it does not know rather than guessing', () => {
    expect(deleteVerdict('SOMETHING_NEW_IN_PROGRESS')).toEqual({ action: 'refuse', reason: 'the stack is SOMETHING_NEW_IN_PROGRESS, a status in which CloudFormation is not expected to delete the drain' });
  });

  it('says why an update\'s delete leaves the fleet alone', () => {
    expect(deleteVerdict(StackStatus.UPDATE_COMPLETE_CLEANUP_IN_PROGRESS).reason).toBe(
      "an update's cleanup deletes the replaced or removed drain resource (UPDATE_COMPLETE_CLEANUP_IN_PROGRESS); the stack and the fleet under its prefix stay, so nothing is drained",
    );
  });
});
