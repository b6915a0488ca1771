import { describe, expect, it } from 'vitest';
import { adviseRetry, DEFAULT_RETRY_POLICY, rateLimitWaitMs } from '../../lambdas/ci/rate-limit';

const now = 1_800_000_000_000;
const h = (headers: Record<string, string>) => (name: string) => headers[name];

describe('rateLimitWaitMs', () => {
  it.each([
    [429, { 'retry-after': '3' }, 3000],
    [403, { 'retry-after': '7' }, 7000],
    [429, { 'retry-after': new Date(now + 4000).toUTCString() }, 4000],
    [403, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(now / 1000 + 12) }, 12000],
    [429, { 'ratelimit-reset': String(now / 1000 + 5) }, 5000], // GitLab
    [403, { 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': String(now / 1000 - 5) }, 0], // reset already passed
    [403, { 'x-ratelimit-remaining': '12', 'x-ratelimit-reset': String(now / 1000 + 5) }, undefined], // a permission error
    [403, {}, undefined],
    [429, {}, 60_000],
    [500, { 'retry-after': '1' }, undefined],
    [404, {}, undefined],
  ] as const)('%i %j -> %s', (status, headers, expected) => {
    expect(rateLimitWaitMs(status, h(headers), now)).toBe(expected);
  });
});

describe('adviseRetry', () => {
  const p = { ...DEFAULT_RETRY_POLICY, maxAttempts: 3, maxWaitMs: 10_000, backoffMs: 100 };
  it.each([
    [429, { 'retry-after': '2' }, 1, { retry: true, waitMs: 3000, why: 'rate-limit' }],
    [429, { 'retry-after': '10' }, 1, { retry: true, waitMs: 10_000, why: 'rate-limit' }], // at the bound: no extra second
    [429, { 'retry-after': '11' }, 1, { retry: false }], // beyond the bound
    [429, { 'retry-after': '2' }, 3, { retry: false }], // out of attempts
    [502, {}, 1, { retry: true, waitMs: 100, why: 'server-error' }],
    [503, {}, 2, { retry: true, waitMs: 200, why: 'server-error' }],
    [401, {}, 1, { retry: false }],
    [404, {}, 1, { retry: false }],
    [422, {}, 1, { retry: false }],
  ] as const)('%i %j attempt %i', (status, headers, attempt, expected) => {
    expect(adviseRetry(status, h(headers), now, attempt, p)).toMatchObject(expected);
  });
  it('does not retry 5xx for calls that are unsafe to repeat', () => {
    expect(adviseRetry(500, h({}), now, 1, { ...p, retryServerErrors: false }).retry).toBe(false);
  });
});
