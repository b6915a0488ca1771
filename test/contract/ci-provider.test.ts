import { describe, expect, it } from 'vitest';
import type { CiProvider, JobMessage } from '../../lambdas/shared/contract';

describe('CiProvider.resolveLabels', () => {
  it('takes an optional AbortSignal; providers that ignore it still satisfy the interface', async () => {
    const seen: (AbortSignal | undefined)[] = [];
    const withSignal: CiProvider = {
      provider: 'gitlab',
      createRunner: () => Promise.reject(new Error('unused')),
      deleteRunner: () => Promise.resolve(),
      listRunners: () => Promise.resolve([]),
      isJobQueued: () => Promise.resolve(true),
      resolveLabels: (_job: JobMessage, signal?: AbortSignal) => {
        seen.push(signal);
        return Promise.resolve(['docker']);
      },
    };
    const withoutSignal: CiProvider = { ...withSignal, resolveLabels: () => Promise.resolve(['linux']) };
    const signal = AbortSignal.timeout(1_000);
    expect(await withSignal.resolveLabels!({} as JobMessage, signal)).toEqual(['docker']);
    expect(await withoutSignal.resolveLabels!({} as JobMessage, signal)).toEqual(['linux']);
    expect(seen).toEqual([signal]);
  });
});
