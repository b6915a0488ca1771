import { describe, expect, it } from 'vitest';
import { GITHUB_RECONCILE_DEFAULTS, inFairShares, nextCursor, queuedMessages, reconciledDeliveryId, repositoryWindow, runReadShare } from '../../lambdas/reconcile/github';
import { RateBudget } from '../../lambdas/reconcile/rate-budget';
import { chooseRedeliveries, parseDeliveries, type ListedDelivery } from '../../lambdas/reconcile/redeliveries';
import { parseJobMessage } from '../../lambdas/shared/contract';
import { fleetConfig, Lines } from '../support/fixtures';
import { createLogger } from '../../lambdas/shared/log';

const NOW = Date.parse('2026-12-02T12:00:00Z');
const d = (id: number, guid: string, statusCode: number, extra: Partial<ListedDelivery> = {}): ListedDelivery => ({
  id,
  guid,
  deliveredAt: NOW - 60_000,
  statusCode,
  event: 'workflow_job',
  action: 'queued',
  ...extra,
});
const rules = { limit: 10, maxAttempts: 3, notBefore: NOW - 3600_000 };

describe('chooseRedeliveries', () => {
  it('redelivers a failed queued workflow_job delivery, the newest attempt of it', () => {
    expect(chooseRedeliveries([d(5, 'a', 502, { deliveredAt: NOW }), d(2, 'a', 500)], rules)).toEqual({ redeliver: [5], givenUp: [], deferred: 0 });
  });
  it('leaves a GUID alone once one attempt succeeded (the original or a redelivery)', () => {
    expect(chooseRedeliveries([d(2, 'a', 500), d(3, 'a', 202)], rules).redeliver).toEqual([]);
  });
  it('ignores other events, other actions, and deliveries older than the bound', () => {
    const listed = [d(1, 'a', 500, { event: 'push', action: undefined }), d(2, 'b', 500, { action: 'completed' }), d(3, 'c', 500, { deliveredAt: rules.notBefore - 1 })];
    expect(chooseRedeliveries(listed, rules).redeliver).toEqual([]);
  });
  it('gives up on a GUID after maxAttempts failed attempts', () => {
    expect(chooseRedeliveries([d(1, 'a', 500), d(2, 'a', 0), d(3, 'a', 503)], rules)).toEqual({ redeliver: [], givenUp: ['a'], deferred: 0 });
  });
  it('redelivers at most `limit`, newest first, and counts the rest as deferred', () => {
    const listed = Array.from({ length: 5 }, (_, i) => d(i + 1, `g${i}`, 500));
    expect(chooseRedeliveries(listed, { ...rules, limit: 2 })).toEqual({ redeliver: [5, 4], givenUp: [], deferred: 3 });
  });
  it('parses GitHub\'s wire format and skips entries without the fields it needs', () => {
    const wire = [
      { id: 12, guid: '0b98', delivered_at: '2026-12-02T11:59:00Z', redelivery: false, duration: 0.27, status: 'Invalid HTTP Response: 503', status_code: 503, event: 'workflow_job', action: 'queued', installation_id: 1, repository_id: 2 },
      { id: 13, guid: 'x', delivered_at: 'not a time', status_code: 200, event: 'ping' },
    ];
    expect(parseDeliveries(wire)).toEqual([{ id: 12, guid: '0b98', deliveredAt: Date.parse('2026-12-02T11:59:00Z'), statusCode: 503, event: 'workflow_job', action: 'queued' }]);
    expect(() => parseDeliveries({ message: 'Not Found' })).toThrow(/not a list/);
  });
});

describe('RateBudget', () => {
  it('allows calls until one more would eat into the reserve (20% of the limit, at least the minimum)', () => {
    const b = new RateBudget(0.2, 100);
    expect(b.allows('installation')).toBe(true);
    b.observe('installation', (h) => ({ 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '1001' })[h]);
    expect(b.allows('installation')).toBe(true);
    b.observe('installation', (h) => ({ 'x-ratelimit-limit': '5000', 'x-ratelimit-remaining': '1000' })[h]);
    expect(b.allows('installation')).toBe(false);
    expect(b.allows('app')).toBe(true);
    expect(new RateBudget(0.2, 100).reserveOf(60)).toBe(100);
    expect(b.remaining()).toEqual(new Map([['installation', 1000]]));
  });
});

describe('queued jobs as messages', () => {
  const deps = { github: fleetConfig().github!, pools: fleetConfig().pools, options: { ...GITHUB_RECONCILE_DEFAULTS, minQueuedSeconds: 120 }, now: () => new Date(NOW), log: createLogger({}, new Lines().sink) };
  const ghJob = (id: number, status: string, labels: string[], createdAgoS = 600) => ({ id, run_id: 1, status, labels, created_at: new Date(NOW - createdAgoS * 1000).toISOString() });

  it('a queued job matching a pool becomes the webhook\'s message, its trace id naming the reconciler', () => {
    const [m, ...rest] = queuedMessages(deps, 'acme', 'app', [ghJob(7, 'queued', ['self-hosted', 'linux']), ghJob(8, 'in_progress', ['linux']), ghJob(9, 'queued', ['ubuntu-latest'])]);
    expect(rest).toEqual([]);
    expect(parseJobMessage(JSON.stringify(m))).toEqual(m);
    expect(m).toMatchObject({ jobId: 'github:7', pool: 'linux', owner: 'acme', project: 'app', deliveryId: reconciledDeliveryId('7'), traceId: 'reconciler-github-7', labelsResolved: true });
    // The job's creation time is carried, as the webhook carries the delivery's created_at.
    expect(m!.createdAt).toBe(new Date(NOW - 600_000).toISOString());
  });
  it('carries no createdAt when the job gives none (it is then not held back by minQueuedSeconds)', () => {
    const [m] = queuedMessages(deps, 'acme', 'app', [{ id: 7, status: 'queued', labels: ['linux'] }]);
    expect(m).toBeDefined();
    expect(m).not.toHaveProperty('createdAt');
  });
  it("leaves a paused pool's queued job at GitHub, to be found once the pool resumes", () => {
    const paused = { ...deps, pools: deps.pools.map((p) => ({ ...p, maxRunners: 0 })) };
    expect(queuedMessages(paused, 'acme', 'app', [ghJob(7, 'queued', ['linux'])])).toEqual([]);
    expect(queuedMessages(deps, 'acme', 'app', [ghJob(7, 'queued', ['linux'])])).toHaveLength(1);
  });
  it('leaves a job younger than minQueuedSeconds to its webhook delivery', () => {
    expect(queuedMessages(deps, 'acme', 'app', [ghJob(7, 'queued', ['linux'], 30)])).toEqual([]);
  });
});

describe('runReadShare', () => {
  it('gives each repository left an equal part of the reads left, at least 1, never more than is left', () => {
    expect(runReadShare(100, 20)).toBe(5);
    expect(runReadShare(40, 20)).toBe(2);
    expect(runReadShare(5, 20)).toBe(1);
    expect(runReadShare(1, 1)).toBe(1);
    expect(runReadShare(0, 3)).toBe(0);
    expect(runReadShare(7, 0)).toBe(0);
  });
  it('never gives more than the reads left, for every whole count (the limit is validated a whole number): no cap is needed', () => {
    // floor(r / n) <= r for n >= 1, and max(1, that) <= r once r >= 1.
    for (let readsLeft = 1; readsLeft <= 1000; readsLeft++) {
      for (let repositoriesLeft = 1; repositoriesLeft <= 60; repositoriesLeft++) {
        const share = runReadShare(readsLeft, repositoriesLeft);
        if (share !== Math.max(1, Math.floor(readsLeft / repositoriesLeft)) || share > readsLeft) expect.unreachable(`runReadShare(${readsLeft}, ${repositoriesLeft}) = ${share}`);
      }
    }
  });
  it('carries what a quiet repository leaves to the ones after it, and never spends more than the limit', async () => {
    // The reconciler's own loop over a window, each repository spending min(its runs, its share).
    const spend = async (runs: number[], limit: number) => {
      const reads = { runs: 0 };
      const read = runs.map(() => 0);
      const visited: number[] = [];
      await inFairShares(runs.map((_, i) => i), limit, reads, async (i, share) => {
        visited.push(i);
        read[i] = Math.min(runs[i]!, share);
        reads.runs += read[i];
      });
      return { read, spent: reads.runs, visited };
    };
    // Repository 0 has 150 runs, the others 1 each: every repository is read, within the limit.
    const runs = [150, ...Array.from({ length: 19 }, () => 1)];
    const first = await spend(runs, 40);
    expect(first.read[0]).toBe(2);
    expect(first.read.slice(1).every((n) => n === 1)).toBe(true);
    expect(first.spent).toBe(21);
    // A busy last repository gets what the quiet ones left.
    const last = await spend([...runs.slice(1), 150], 40);
    expect(last.read[19]).toBe(21);
    expect(last.spent).toBe(40);
    // Busy everywhere: the limit is spent exactly and the loop stops, the repositories past it
    // not visited (a visit lists the repository's runs: two requests for nothing).
    const busy = await spend(Array.from({ length: 5 }, () => 100), 3);
    expect(busy).toEqual({ read: [1, 1, 1, 0, 0], spent: 3, visited: [0, 1, 2] });
  });
});

describe('paging and rotation', () => {
  it('reads the cursor of rel="next"', () => {
    expect(nextCursor('<https://api.github.com/app/hook/deliveries?per_page=100&cursor=v1_42>; rel="next"')).toBe('v1_42');
    expect(nextCursor(undefined)).toBeUndefined();
    expect(nextCursor('<https://x/?page=1>; rel="prev"')).toBeUndefined();
  });
  it('reads at most cap repositories a run, in consecutive windows', () => {
    expect(repositoryWindow(['a', 'b', 'c', 'd', 'e'], 0, 2)).toEqual(['a', 'b']);
    expect(repositoryWindow(['a', 'b', 'c', 'd', 'e'], 1, 2)).toEqual(['c', 'd']);
    expect(repositoryWindow(['a', 'b', 'c', 'd', 'e'], 2, 2)).toEqual(['e', 'a']);
    expect(repositoryWindow(['a', 'b', 'c'], 7, 10)).toEqual(['b', 'c', 'a']);
    expect(repositoryWindow([], 3, 2)).toEqual([]);
  });
  it('visits every repository within ceil(N/cap) consecutive runs, from any run number', () => {
    // Run numbers as a 5-minute schedule produces them today (floor(now / 300 s)), and small ones.
    const firstRuns = [0, 1, 17, Math.floor(Date.parse('2026-12-02T12:00:00Z') / 300_000)];
    for (const n of [1, 2, 3, 7, 10, 99, 100, 101, 250, 1000]) {
      const repos = Array.from({ length: n }, (_, i) => i);
      for (const cap of [1, 2, 3, 7, 50, 100, 1000]) {
        for (const first of firstRuns) {
          const visited = new Set<number>();
          for (let k = first; k < first + Math.ceil(n / cap); k++) {
            const window = repositoryWindow(repos, k, cap);
            expect(window.length).toBe(Math.min(n, cap));
            window.forEach((r) => visited.add(r));
          }
          expect(visited.size, `N=${n} cap=${cap} first run ${first}`).toBe(n);
        }
      }
    }
  });
});
