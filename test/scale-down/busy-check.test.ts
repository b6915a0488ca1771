import { describe, expect, it } from 'vitest';
import { busyAtProvider } from '../../lambdas/scale-down/busy-check';
import { Provider, type CiProvider } from '../../lambdas/shared/contract';

const base: CiProvider = {
  provider: Provider.GITLAB,
  createRunner: () => Promise.reject(new Error('not used')),
  deleteRunner: () => Promise.reject(new Error('not used')),
  listRunners: () => Promise.resolve([]),
  isJobQueued: () => Promise.resolve(false),
};

describe('busyAtProvider: the last reading before an idle DELETE', () => {
  it('a provider without the signal is not asked', async () => {
    expect(await busyAtProvider(base, '1', 1_000)).toEqual({ busy: false });
  });

  it('busy and idle answers pass through, with the runner id asked', async () => {
    const asked: string[] = [];
    const ci = (busy: boolean): CiProvider => ({ ...base, runnerBusy: (id) => (asked.push(id), Promise.resolve(busy)) });
    expect(await busyAtProvider(ci(true), '7', 1_000)).toEqual({ busy: true, why: 'running-job' });
    expect(await busyAtProvider(ci(false), '8', 1_000)).toEqual({ busy: false });
    expect(asked).toEqual(['7', '8']);
  });

  it('a failure or no answer in time is unknown, and unknown is busy', async () => {
    const failing: CiProvider = { ...base, runnerBusy: () => Promise.reject(Object.assign(new Error('x'), { name: 'GitLabApiError' })) };
    expect(await busyAtProvider(failing, '1', 1_000)).toEqual({ busy: true, why: 'unknown', error: 'GitLabApiError' });
    const hanging: CiProvider = { ...base, runnerBusy: () => new Promise<boolean>(() => {}) };
    expect(await busyAtProvider(hanging, '1', 10)).toMatchObject({ busy: true, why: 'unknown' });
  });
});
