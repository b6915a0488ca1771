import { describe, expect, it } from 'vitest';
import { deregisterIdleRunner, resolvePause } from '../../lambdas/scale-down/pause-first';
import { Provider, type CiProvider } from '../../lambdas/shared/contract';

/** A GitLab-like double: one runner, its pause flag, its running job; `lose` loses the answers of the calls it names after they applied. */
function double(opts: { busy?: boolean; lose?: Set<string>; readBackFails?: boolean; deleteFails?: boolean } = {}) {
  const state = { exists: true, paused: false, calls: [] as string[] };
  const lost = (name: string) => {
    if (opts.lose?.has(name)) throw Object.assign(new Error('lost'), { name: 'GitLabApiError' });
  };
  const ci: CiProvider = {
    provider: Provider.GITLAB,
    createRunner: () => Promise.reject(new Error('not used')),
    listRunners: () => Promise.resolve([]),
    isJobQueued: () => Promise.resolve(false),
    runnerBusy: async () => (state.calls.push('busy'), opts.busy ?? false),
    setRunnerPaused: async (_id, paused) => {
      state.calls.push(paused ? 'pause' : 'unpause');
      if (!state.exists) throw Object.assign(new Error('404'), { name: 'GitLabApiError' });
      state.paused = paused;
      lost(paused ? 'pause' : 'unpause');
    },
    runnerPaused: async () => {
      state.calls.push('read');
      if (opts.readBackFails) throw Object.assign(new Error('503'), { name: 'GitLabApiError' });
      return state.exists ? state.paused : undefined;
    },
    deleteRunner: async () => {
      state.calls.push('delete');
      state.exists = false;
      lost('delete');
      if (opts.deleteFails) throw Object.assign(new Error('503'), { name: 'GitLabApiError' });
    },
  };
  return { ci, state };
}

describe('resolvePause: a lost answer is decided by the runner read back', () => {
  it('applied, not applied, gone, unknown', () => {
    expect(resolvePause(true, true)).toBe('applied');
    expect(resolvePause(true, false)).toBe('not-applied');
    expect(resolvePause(false, false)).toBe('applied');
    expect(resolvePause(false, undefined)).toBe('gone');
    expect(resolvePause(true, 'failed')).toBe('unknown');
  });
});

describe('deregisterIdleRunner: pause, ask, delete; every path that keeps the runner unpauses it', () => {
  it('idle: paused, asked, deleted, in that order', async () => {
    const { ci, state } = double();
    expect(await deregisterIdleRunner(ci, '1', 1_000)).toEqual({ deleted: true });
    expect(state.calls).toEqual(['pause', 'busy', 'delete']);
  });

  it('busy: kept and unpaused', async () => {
    const { ci, state } = double({ busy: true });
    expect(await deregisterIdleRunner(ci, '1', 1_000)).toEqual({ deleted: false, why: 'running-job', unpause: 'applied' });
    expect(state.paused).toBe(false);
  });

  it('a pause whose answer and read-back both fail: kept, and the pause that may have happened is undone', async () => {
    const { ci, state } = double({ lose: new Set(['pause']), readBackFails: true });
    expect(await deregisterIdleRunner(ci, '1', 1_000)).toMatchObject({ deleted: false, why: 'pause-failed', unpause: 'applied' });
    expect(state.paused).toBe(false);
    expect(state.calls).not.toContain('delete');
  });

  it('a DELETE whose answer was lost but which happened: the unpause finds the runner gone, the instance may go', async () => {
    const { ci, state } = double({ lose: new Set(['delete']) });
    expect(await deregisterIdleRunner(ci, '1', 1_000)).toEqual({ deleted: true });
    expect(state.calls).toEqual(['pause', 'busy', 'delete', 'unpause', 'read']);
  });

  it('a provider that cannot pause (GitHub): the reading and the DELETE as before', async () => {
    const { ci, state } = double();
    const github: CiProvider = { ...ci, setRunnerPaused: undefined, runnerPaused: undefined };
    expect(await deregisterIdleRunner(github, '1', 1_000)).toEqual({ deleted: true });
    expect(state.calls).toEqual(['busy', 'delete']);
  });
});
