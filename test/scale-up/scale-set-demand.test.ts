import { describe, expect, it } from 'vitest';
import { SCALE_UP_DEFAULTS } from '../../lambdas/scale-up/handler';
import { scaleSetObserved, scaleSetShortfall } from '../../lambdas/scale-up/scale-set-demand';
import { scaleSetSlotReserveMs } from '../../lambdas/scale-up/scale-set-serve';
import { SCALE_UP_TIMEOUT_SECONDS } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { KEYS, standbyTags } from '../support/fixtures';

describe('scaleSetShortfall', () => {
  it.each([
    // assigned, runners, ending, maxRunners, shortfall
    [0, 0, 0, 10, 0],
    [3, 0, 0, 10, 3],
    [3, 1, 0, 10, 2],
    [3, 3, 0, 10, 0],
    // More runners than assigned jobs: none started, none stopped here (the idle rule's).
    [2, 5, 0, 10, 0],
    // The pool's bound caps what is wanted.
    [50, 0, 0, 10, 10],
    [50, 4, 0, 10, 6],
    // Ending instances still hold places against maxRunners.
    [50, 4, 3, 10, 3],
    [5, 2, 8, 10, 0],
    // A paused pool (maxRunners 0) starts nothing.
    [5, 0, 0, 0, 0],
    // Nonsense readings start nothing.
    [-3, 0, 0, 10, 0],
    [2.7, 0, 0, 10, 2],
  ])('assigned %i, runners %i, ending %i, max %i: %i', (assigned, runners, ending, maxRunners, shortfall) => {
    expect(scaleSetShortfall(assigned, { runners, ending }, { maxRunners })).toBe(shortfall);
  });
});

describe('scaleSetObserved', () => {
  const at = (id: string, state: string, tags: Record<string, string>): ObservedInstance => ({ id, state, launchTime: new Date(0), tags: new Map(Object.entries(tags)) });
  const activated = { [KEYS.pool]: 'linux', [KEYS.activatedAt]: '2026-12-06T00:00:00Z', [KEYS.jobId]: 'github:scale-set-1-t-0' };

  it('counts activated instances of the pool starting, idle or busy; ending ones apart; parked, priming and other pools not', () => {
    const observed = scaleSetObserved(
      [
        at('i-1', 'pending', activated),
        at('i-2', 'running', activated),
        at('i-3', 'running', { ...activated, [KEYS.jobStarted]: '2026-12-06T00:01:00Z' }),
        at('i-4', 'stopping', activated),
        at('i-5', 'stopped', standbyTags()),
        at('i-6', 'running', standbyTags()),
        at('i-7', 'running', { ...activated, [KEYS.pool]: 'other' }),
        at('i-8', 'shutting-down', activated),
      ],
      'linux',
      KEYS,
    );
    expect(observed).toEqual({ runners: 3, ending: 1 });
  });

  const now = new Date('2026-12-06T00:02:00Z');
  const recent = (instanceId: string, agoMs: number) => ({ instanceId, startedAt: new Date(now.getTime() - agoMs).toISOString() });

  it('a runner a recent demand started counts while the observation does not show it active (EC2 reads lag writes)', () => {
    const observed = scaleSetObserved(
      [
        at('i-1', 'running', activated),
        // Activated a moment ago, still read as parked; another still read as priming.
        at('i-2', 'stopped', { ...standbyTags(), [KEYS.pool]: 'linux' }),
        at('i-3', 'pending', { ...standbyTags(), [KEYS.pool]: 'linux' }),
        // Gone: its runner ended, it holds no job's place.
        at('i-4', 'terminated', activated),
      ],
      'linux',
      KEYS,
      // i-1 is observed active (counted once); i-5 is not observed at all (launched, not listed yet);
      // i-6 was started too long ago to be a lag; i-5 is named twice.
      [recent('i-1', 5_000), recent('i-2', 5_000), recent('i-3', 5_000), recent('i-4', 5_000), recent('i-5', 1_000), recent('i-5', 1_000), recent('i-6', 3 * 60_000 + 1)],
      now,
    );
    expect(observed).toEqual({ runners: 4, ending: 0 });
  });

  it('a runner whose job completed (the listener marked it idle after its job started) is no runner for new jobs, but still holds a place', () => {
    const started = { ...activated, [KEYS.jobStarted]: '2026-12-06T00:01:00Z' };
    const observed = scaleSetObserved(
      [
        at('i-1', 'running', { ...started, [KEYS.idleSince]: '2026-12-06T00:01:30Z' }),
        // An idle mark from before its job (a sweep's reading), or with no job reported: still a runner.
        at('i-2', 'running', { ...started, [KEYS.idleSince]: '2026-12-06T00:00:30Z' }),
        at('i-3', 'running', { ...activated, [KEYS.idleSince]: '2026-12-06T00:01:30Z' }),
      ],
      'linux',
      KEYS,
      [],
      now,
    );
    expect(observed).toEqual({ runners: 2, ending: 1 });
    expect(scaleSetShortfall(3, observed, { maxRunners: 10 })).toBe(1);
  });
});

describe('scaleSetSlotReserveMs', () => {
  it("leaves at least 10 s of scale-up's timeout with the default CI timeout: the first slots start", () => {
    expect(SCALE_UP_TIMEOUT_SECONDS * 1000 - scaleSetSlotReserveMs(SCALE_UP_DEFAULTS.ciTimeoutMs)).toBeGreaterThanOrEqual(10_000);
  });
});
