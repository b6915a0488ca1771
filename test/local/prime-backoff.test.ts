import { describe, expect, it } from 'vitest';
import { freshStreak } from '../../lambdas/pool/backoff';
import { buildFleetConfig, Provider, tagKeys, WARM_STANDBY_VALUE } from '../../lambdas/shared/contract';
import { backoffSkewMs, PrimeBackoffWatch } from '../../local/prime-backoff';
import type { ObservedInstance } from '../../local/report';

const prefix = 'pb';
const keys = tagKeys(prefix);
// Priming timeout 120 s, limit 3, cap 3600 s.
const config = buildFleetConfig({
  prefix,
  github: { appId: '1', organization: 'acme' },
  pools: [{ name: 'gh', provider: Provider.GITHUB, launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'], warmSize: 3, primingTimeoutSeconds: 120 }],
});
const NOW = Date.parse('2026-12-02T05:00:00Z');
const standby = (id: string, state: string, launchedAt: number, extra: Record<string, string> = {}): ObservedInstance => ({
  id,
  state,
  launchedAt,
  tags: { [keys.pool]: 'gh', [keys.warmStandby]: WARM_STANDBY_VALUE, ...extra },
});
const skew = (instances: ObservedInstance[], failed: string[], streak = freshStreak('lt-1:1'), backingOff: string[] = []) =>
  backoffSkewMs({ config, instances, failed: new Set(failed), streaks: { gh: streak }, backingOff: new Set(backingOff), now: NOW });

describe('backoffSkewMs: how far the pool clock moves so the back-off goes on', () => {
  it('past the priming timeout of the latest standby once every priming standby has failed its boot', () => {
    const a = standby('i-a', 'running', NOW - 10_000);
    const b = standby('i-b', 'running', NOW - 2_000);
    expect(skew([a, b], ['i-a', 'i-b'])).toBe(120_000 + 1_000 - 2_000);
  });
  it('not while a standby still boots, nor for one activated, nor for a pool already backing off', () => {
    const a = standby('i-a', 'running', NOW - 10_000);
    expect(skew([a, standby('i-b', 'running', NOW)], ['i-a'])).toBe(0);
    expect(skew([a], ['i-a'], undefined, ['gh'])).toBe(0);
    expect(skew([standby('i-c', 'running', NOW, { [keys.activatedAt]: 'x' })], [])).toBe(0);
    expect(skew([standby('i-d', 'stopped', NOW)], [])).toBe(0);
  });
  it('to the next probe when nothing primes and the streak holds launches back', () => {
    const lastFailureAt = new Date(NOW - 5_000).toISOString();
    // One failure in a row: the base delay of 60 s.
    expect(skew([], [], { ...freshStreak('lt-1:1'), failures: 1, lastFailureAt })).toBe(60_000 - 5_000 + 1_000);
    // Already due, or no failure yet: nothing to wait out.
    expect(skew([], [], { ...freshStreak('lt-1:1'), failures: 1, lastFailureAt: new Date(NOW - 120_000).toISOString() })).toBe(0);
    expect(skew([], [])).toBe(0);
  });
});

describe('PrimeBackoffWatch', () => {
  it('keeps the last and the highest PrimeBackoff per pool from the EMF lines, and ignores the rest', () => {
    const w = new PrimeBackoffWatch('PrimeBackoff');
    const emf = (pool: string, value: number) => JSON.stringify({ _aws: { Timestamp: 1, CloudWatchMetrics: [] }, Pool: pool, PrimeBackoff: value, Parked: 0 });
    w.onLine(emf('gh', 0));
    w.onLine(emf('gh', 1));
    w.onLine(emf('gl', 0));
    w.onLine('{"level":"info","message":"pool run","PrimeBackoff":1,"Pool":"gl"}');
    w.onLine('{"_aws": not json');
    w.onLine(JSON.stringify({ _aws: {}, Pool: 'gl', Parked: 3 }));
    expect(w.last).toEqual({ gh: 1, gl: 0 });
    w.onLine(emf('gh', 0));
    expect(w.last.gh).toBe(0);
    expect(w.max).toEqual({ gh: 1, gl: 0 });
  });
});
