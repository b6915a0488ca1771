import { describe, expect, it } from 'vitest';
import type { JobRecords, ServedState } from '../../lambdas/scale-up/job-record';
import { checkServed, type RetryCheckContext } from '../../lambdas/scale-up/retry-check';
import { METRIC_NAMES, type PoolConfig } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { createLogger, Metrics } from '../../lambdas/shared/log';
import { fleetConfig, job, KEYS, Lines, record } from '../support/fixtures';

/**
 * checkServed without AWS: the max job duration it judges an instance's job-started report by
 * is the job's pool's (`maxJobSeconds`), not the fleet default. The runner of the job's pool
 * reads online and not busy (as GitHub may mid-job) and its instance reported its job started
 * two hours ago: within the default 6 hours that report holds (the runner is at work, no
 * runner could take the job: retry); past a pool's 1 hour it is stale (the runner is idle: wait).
 */
const NOW = new Date('2026-11-29T12:00:00.000Z');
const RETRY_AFTER = 300;
const ago = (seconds: number) => new Date(NOW.getTime() - seconds * 1000).toISOString();

const reportedTwoHoursAgo: ObservedInstance = {
  id: 'i-0000000000000000a',
  state: 'running',
  launchTime: new Date(NOW.getTime() - 3 * 3600_000),
  tags: new Map([
    [KEYS.pool, 'linux'],
    [KEYS.jobId, 'github:9'],
    [KEYS.runnerId, '1'],
    [KEYS.activatedAt, ago(3 * 3600)],
    [KEYS.jobStarted, ago(2 * 3600)],
  ]),
};
const served: ServedState = { servedAt: NOW.getTime() / 1000 - RETRY_AFTER - 1, instanceId: 'i-first', attempt: 0, exhausted: false };
const records: JobRecords = {
  claim: async () => {
    throw new Error('not called');
  },
  release: async () => {
    throw new Error('not called');
  },
  markServed: async () => {
    throw new Error('not called');
  },
  advance: async () => ({ kind: 'won' }),
};

async function check(pools: readonly PoolConfig[]) {
  const lines = new Lines();
  const item = { job: job(1), pool: 'linux', log: createLogger({}, lines.sink), record: record(JSON.stringify(job(1)), { id: 'm-1' }), retryCheck: true };
  const settled: string[] = [];
  const ctx: RetryCheckContext<typeof item> = {
    records,
    retry: { retryAfterSeconds: RETRY_AFTER, limit: 2 },
    maxWaitSeconds: 24 * 3600,
    keys: KEYS,
    pools,
    now: () => NOW,
    metrics: new Metrics('test', lines.sink),
    names: METRIC_NAMES,
    observeFleet: async () => [reportedTwoHoursAgo],
    runnersOf: async () => [{ runnerId: '1', name: 'r-1', status: 'online', busy: false }],
    providerOf: () => ({}) as never,
    stillQueued: async () => true,
    settle: (r) => settled.push(r.messageId),
    fail: () => expect.unreachable('no step fails'),
    deadLetter: async () => expect.unreachable('nothing is dead-lettered'),
    scheduleCheck: async () => undefined,
  };
  const retried = await checkServed(ctx, [{ item, served, superseded: [], mine: true }]);
  return { retried, settled, lines };
}

describe("the retry check judges a runner's job-started report by its pool's maxJobSeconds", () => {
  it('the default (6 hours): the report 2 hours old holds, the runner is at work, so another runner starts', async () => {
    const { retried, settled } = await check(fleetConfig().pools);
    expect(retried.map((r) => r.superseded)).toEqual([['i-first']]);
    expect(settled).toEqual([]);
  });

  it("the pool's 1 hour: the same report is stale, the runner reads idle, so the check waits for it", async () => {
    const { retried, settled, lines } = await check(fleetConfig({ maxJobSeconds: 3600 }).pools);
    expect(retried).toEqual([]);
    expect(settled).toEqual(['m-1']);
    expect(lines.logs(/^the job is still queued, but a runner of its pool is idle or starting/)[0]).toMatchObject({ instanceId: reportedTwoHoursAgo.id });
  });

  it("another pool's 1 hour does not apply to this job's pool (listed before it)", async () => {
    const pools = fleetConfig().pools;
    const { retried } = await check([{ ...pools[0]!, name: 'gpu', maxJobSeconds: 3600 }, ...pools]);
    expect(retried).toHaveLength(1);
  });

  it("another pool's longer maximum (listed after it) does not keep this pool's stale report alive", async () => {
    const pools = fleetConfig({ maxJobSeconds: 3600 }).pools;
    const { retried, settled } = await check([...pools, { ...pools[0]!, name: 'gpu', maxJobSeconds: 24 * 3600 }]);
    expect(retried).toEqual([]);
    expect(settled).toEqual(['m-1']);
  });
});
