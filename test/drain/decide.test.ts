import { describe, expect, it } from 'vitest';
import { decideDrain, type DrainObservation } from '../../lambdas/drain/decide';
import { Provider } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { KEYS } from '../support/fixtures';

const settings = { quietMs: 180_000, deadlineMs: 1_680_000 };
const instance = (id: string, state: string, spotRequestId?: string): ObservedInstance => ({
  id,
  state,
  launchTime: new Date(0),
  tags: new Map([[KEYS.pool, 'linux']]),
  ...(spotRequestId ? { spotRequestId } : {}),
});
const empty: DrainObservation = {
  instances: [],
  parameters: [],
  runners: new Map([[Provider.GITHUB, { runners: [] }]]),
  scalingNotStopped: [],
  elapsedMs: 200_000,
};

describe('decideDrain', () => {
  it('is complete when nothing is left, every list was read, scaling is stopped and the quiet period has passed', () => {
    expect(decideDrain(empty, settings)).toMatchObject({ complete: true, failed: false, remaining: [], terminate: [], deleteParameters: [], deregister: [] });
  });

  it('terminates every live instance, parked ones included, and cancels spot requests first', () => {
    const step = decideDrain(
      { ...empty, instances: [instance('i-1', 'stopped', 'sir-1'), instance('i-2', 'running'), instance('i-3', 'pending'), instance('i-4', 'stopping', 'sir-1'), instance('i-5', 'shutting-down')] },
      settings,
    );
    expect(step.terminate.map((i) => i.id)).toEqual(['i-1', 'i-2', 'i-3', 'i-4']);
    expect(step.cancelSpotRequests).toEqual(['sir-1']);
    expect(step.complete).toBe(false);
    expect(step.remaining).toEqual(['5 instances not terminated (i-1 stopped, i-2 running, i-3 pending, i-4 stopping, i-5 shutting-down)']);
  });

  it('waits for an instance that is shutting down without terminating it again', () => {
    const step = decideDrain({ ...empty, instances: [instance('i-5', 'shutting-down')] }, settings);
    expect(step.terminate).toEqual([]);
    expect(step.complete).toBe(false);
  });

  it('deletes every parameter and deregisters every runner, busy ones too (tried again on the next poll)', () => {
    const step = decideDrain(
      {
        ...empty,
        parameters: ['/test/runners/config/i-1', '/test/pools/linux/prime-state'],
        runners: new Map([
          [Provider.GITHUB, { runners: [{ runnerId: '7', name: 'test-i-1', status: 'online', busy: true }] }],
          [Provider.GITLAB, { runners: [{ runnerId: '9', name: 'test-i-2', status: 'offline' }] }],
        ]),
      },
      settings,
    );
    expect(step.deleteParameters).toEqual(['/test/runners/config/i-1', '/test/pools/linux/prime-state']);
    expect(step.deregister).toEqual([
      { provider: Provider.GITHUB, runnerId: '7' },
      { provider: Provider.GITLAB, runnerId: '9' },
    ]);
    expect(step.complete).toBe(false);
  });

  it('is never complete while a provider list is unknown: unknown is not empty', () => {
    const step = decideDrain({ ...empty, runners: new Map([[Provider.GITHUB, { unknown: 'TimeoutError' }]]) }, settings);
    expect(step).toMatchObject({ complete: false, remaining: ['github runners unknown (listing failed: TimeoutError)'] });
  });

  it('is not complete while scaling is not observed stopped, or before the quiet period has passed', () => {
    expect(decideDrain({ ...empty, scalingNotStopped: ['mapping u-1 Disabling'] }, settings).complete).toBe(false);
    const early = decideDrain({ ...empty, elapsedMs: 60_000 }, settings);
    expect(early).toMatchObject({ complete: false, remaining: ['waiting 120 s for invocations started before the stop'] });
  });

  it('fails past the deadline with what is left, never when complete', () => {
    const left = decideDrain({ ...empty, elapsedMs: settings.deadlineMs, parameters: ['/test/runners/config/i-1'] }, settings);
    expect(left).toMatchObject({ complete: false, failed: true, remaining: ['1 parameters (/test/runners/config/i-1)'] });
    expect(decideDrain({ ...empty, elapsedMs: settings.deadlineMs + 1 }, settings)).toMatchObject({ complete: true, failed: false });
  });

  it('names at most five ids per kind, so the failure reason stays short', () => {
    const step = decideDrain({ ...empty, parameters: Array.from({ length: 12 }, (_, i) => `/test/runners/config/i-${i}`) }, settings);
    expect(step.remaining[0]).toBe('12 parameters (/test/runners/config/i-0, /test/runners/config/i-1, /test/runners/config/i-2, /test/runners/config/i-3, /test/runners/config/i-4, ...)');
  });
});
