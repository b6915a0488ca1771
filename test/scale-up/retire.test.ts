import { describe, expect, it } from 'vitest';
import { needsVerifying } from '../../lambdas/scale-up/activate';
import { isRetired, planRelease } from '../../lambdas/scale-up/retire';

describe('rollback decisions', () => {
  it.each([
    [false, true, 'start-failed', 'release'],
    [false, true, 'start-lost', 'release'],
    [true, true, 'start-failed', 'retire'],
    [true, true, 'tag-error', 'retire'],
    [true, true, 'activation-error', 'retire'],
    // Someone else started the instance: never terminated by us.
    [true, true, 'start-lost', 'release-foreign'],
    // Not ours to terminate without the claim.
    [true, false, 'activation-error', 'release-foreign'],
  ] as const)('tags left %s, claimed %s, %s: %s', (tagsLeft, claimed, reason, plan) => {
    expect(planRelease(tagsLeft, claimed, reason)).toBe(plan);
  });

  it.each([
    [undefined, true],
    ['terminated', true],
    ['shutting-down', true],
    ['stopped', false],
    ['stopping', false],
    ['running', false],
    ['pending', false],
  ] as const)('state %s retired: %s', (state, retired) => {
    expect(isRetired(state)).toBe(retired);
  });

  it('verifies a claim answered more than freshMs after its observation, only', () => {
    const at = new Date('2026-12-02T12:00:00.000Z');
    const after = (ms: number) => new Date(at.getTime() + ms);
    expect(needsVerifying(after(2_000), at, 2_000)).toBe(false);
    expect(needsVerifying(after(2_001), at, 2_000)).toBe(true);
  });
});
