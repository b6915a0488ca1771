import { describe, expect, it } from 'vitest';
import { JobLookupError, Provider, type CiProvider, type JobMessage } from '../../lambdas/shared/contract';

describe('CiProvider.resolveLabels', () => {
  it('takes an optional AbortSignal; providers that ignore it still satisfy the interface', async () => {
    const seen: (AbortSignal | undefined)[] = [];
    const withSignal: CiProvider = {
      provider: Provider.GITLAB,
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

describe('JobLookupError', () => {
  it('names the provider, the job and the reason, and is told apart from other errors', () => {
    const e: unknown = new JobLookupError(Provider.GITLAB, 'gitlab:1977', 'not-found');
    expect(e).toBeInstanceOf(Error);
    expect(e).toBeInstanceOf(JobLookupError);
    expect(e).toMatchObject({ name: 'JobLookupError', provider: Provider.GITLAB, jobId: 'gitlab:1977', reason: 'not-found' });
    expect((e as Error).message).toMatch(/gitlab job gitlab:1977.*not-found.*cannot see it/);
    expect(new Error('x')).not.toBeInstanceOf(JobLookupError);
  });
});
