import { describe, expect, it } from 'vitest';
import { REPORT_SKEW_MS, reportedStart } from '../../lambdas/shared/job-report';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { KEYS } from '../support/fixtures';

const activatedAt = Date.UTC(2026, 11, 4, 12, 0, 0);
const now = new Date(activatedAt + 10 * 60_000);
const withReport = (ms: number): ObservedInstance => ({
  id: 'i-0123456789abcdef0',
  state: 'running',
  launchTime: new Date(activatedAt),
  tags: new Map([[KEYS.jobStarted, new Date(ms).toISOString()]]),
});

describe('reportedStart: whose job-started report counts (R3)', () => {
  it('counts a report written by an instance clock slightly behind the Lambda clock', () => {
    expect(reportedStart(withReport(activatedAt - 30_000), KEYS, activatedAt, now)).toBe(activatedAt - 30_000);
  });
  it("ignores an earlier activation's report, older than the skew allowance", () => {
    expect(reportedStart(withReport(activatedAt - REPORT_SKEW_MS - 1000), KEYS, activatedAt, now)).toBeUndefined();
    expect(reportedStart(withReport(activatedAt - 3_600_000), KEYS, activatedAt, now)).toBeUndefined();
  });
  it('reads a report after now as one at the activation', () => {
    expect(reportedStart(withReport(now.getTime() + 60_000), KEYS, activatedAt, now)).toBe(activatedAt);
  });
});
