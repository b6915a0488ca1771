import { createHash } from 'node:crypto';
import { EC2Client } from '@aws-sdk/client-ec2';
import { SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { encodeStreak, freshStreak } from '../../lambdas/pool/backoff';
import { planPool, RUNNER_ROLL_BATCH } from '../../lambdas/pool/classify';
import { createPoolHandler } from '../../lambdas/pool/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { encodeRunnerRelease, Provider, RUNNER_VERSION_LATEST, ssmPaths, type FleetConfig } from '../../lambdas/shared/contract';
import type { ObservedInstance } from '../../lambdas/shared/instances';
import { FakeAws } from '../support/fake-aws';
import { fleetConfig, KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';

/** The runner roll of a pool that follows the newest release (planPool's `stale-runner`). */
const NOW = new Date('2026-12-06T12:00:00.000Z');
const minutesAgo = (m: number) => new Date(NOW.getTime() - m * 60_000);
let serial = 0;
function inst(state: string, version: string | undefined, launched = minutesAgo(10), extra: Record<string, string> = {}): ObservedInstance {
  const tags = new Map(Object.entries({ ...standbyTags(), ...(version ? { [KEYS.runnerVersion]: version } : {}), ...extra }));
  return {
    id: `i-${(++serial).toString(16).padStart(17, '0')}`,
    state,
    ...(state === 'stopped' ? { stateReason: 'Client.InstanceInitiatedShutdown' } : {}),
    launchTime: launched,
    tags,
  };
}
const parked = (version: string | undefined, launched?: Date, extra?: Record<string, string>) => inst('stopped', version, launched, extra);
const reasons = (plan: ReturnType<typeof planPool>) => plan.evictions.map((e) => [e.instance.id, e.reason]);

describe('planPool: runner roll', () => {
  const pool = fleetConfig({ warmSize: 5, warmMaxAgeSeconds: 86_400, primingTimeoutSeconds: 600 }).pools[0]!;
  const current = { version: '2.339.0' };

  it('replaces parked instances of another version, oldest first, at most a batch at a time, and launches their replacements', () => {
    const old = [parked('2.338.0', minutesAgo(50)), parked('2.338.0', minutesAgo(40)), parked('2.338.0', minutesAgo(30))];
    const fresh = parked('2.339.0');
    const plan = planPool([...old, fresh], new Set(), pool, KEYS, 4, NOW, undefined, current);
    expect(RUNNER_ROLL_BATCH).toBe(2);
    expect(reasons(plan)).toEqual([
      [old[0]!.id, 'stale-runner'],
      [old[1]!.id, 'stale-runner'],
    ]);
    expect(plan.launch).toBe(2);
    expect(plan.parked).toBe(2);
  });

  it('counts every instance on its way to park as a replacement in flight', () => {
    const old = [parked('2.338.0', minutesAgo(50)), parked('2.338.0', minutesAgo(40))];
    const one = planPool([...old, inst('running', undefined, minutesAgo(1))], new Set(), pool, KEYS, 4, NOW, undefined, current);
    expect(reasons(one)).toEqual([[old[0]!.id, 'stale-runner']]);
    const full = planPool([...old, inst('running', undefined), inst('pending', undefined)], new Set(), pool, KEYS, 4, NOW, undefined, current);
    expect(full.evictions).toEqual([]);
  });

  it('leaves alone: the current version, an instance that names none (its image had the runner), claimed and active ones, and every instance of a pinned pool', () => {
    const same = parked('2.339.0');
    const baked = parked(undefined);
    const claimed = parked('2.338.0');
    const active = inst('running', '2.338.0', minutesAgo(5), { [KEYS.activatedAt]: minutesAgo(1).toISOString() });
    const plan = planPool([same, baked, claimed, active], new Set([claimed.id]), pool, KEYS, 4, NOW, undefined, current);
    expect(plan.evictions).toEqual([]);
    const pinned = planPool([parked('2.338.0'), parked('2.338.0')], new Set(), pool, KEYS, 2, NOW);
    expect(pinned.evictions).toEqual([]);
  });

  it('does not evict an instance twice: over the target first, then the roll from what stays', () => {
    const old = [parked('2.338.0', minutesAgo(50)), parked('2.338.0', minutesAgo(40)), parked('2.338.0', minutesAgo(30))];
    const plan = planPool(old, new Set(), pool, KEYS, 2, NOW, undefined, current);
    // The newest stale one stays until the release proved it parks.
    expect(reasons(plan)).toEqual([
      [old[0]!.id, 'over-target'],
      [old[1]!.id, 'stale-runner'],
    ]);
    expect(new Set(plan.evictions.map((e) => e.instance.id)).size).toBe(plan.evictions.length);
    expect(plan.launch).toBe(1);
  });

  it('keeps one stale parked instance of a small pool (target 2) until a parked instance carries the new release, then rolls it', () => {
    const old = [parked('2.338.0', minutesAgo(50)), parked('2.338.0', minutesAgo(40))];
    const before = planPool(old, new Set(), pool, KEYS, 2, NOW, undefined, current);
    expect(reasons(before)).toEqual([[old[0]!.id, 'stale-runner']]);
    expect(before).toMatchObject({ launch: 1, parked: 1 });
    // The replacement still priming proves nothing: the last old one keeps serving.
    const priming = planPool([old[1]!, inst('running', undefined, minutesAgo(1))], new Set(), pool, KEYS, 2, NOW, undefined, current);
    expect(priming.evictions).toEqual([]);
    expect(priming.parked).toBe(1);
    // Parked on 2.339.0: the release primes, the last old one goes.
    const after = planPool([old[1]!, parked('2.339.0')], new Set(), pool, KEYS, 2, NOW, undefined, current);
    expect(reasons(after)).toEqual([[old[1]!.id, 'stale-runner']]);
    expect(after.launch).toBe(1);
  });
});

describe('pool handler: runner roll', () => {
  let aws: FakeAws;
  let lines: Lines;
  beforeEach(() => {
    aws?.restore();
    aws = new FakeAws();
    lines = new Lines();
  });
  afterAll(() => aws.restore());
  const paths = ssmPaths(PREFIX);
  const sha = (s: string) => createHash('sha256').update(s).digest('hex');
  const store = (version: string) =>
    aws.parameters.set(paths.runnerRelease(Provider.GITHUB), {
      value: encodeRunnerRelease({ version, x64: { url: 'https://e.example/x64', sha256: sha(`${version}x64`) }, arm64: { url: 'https://e.example/arm64', sha256: sha(`${version}arm64`) }, publishedAt: '2026-12-01T00:00:00.000Z' }),
      tags: {},
      at: aws.now,
    });
  const run = (config: FleetConfig) =>
    createPoolHandler({ ec2: new EC2Client({}), ssm: new SSMClient({}), aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }), loadConfig: async () => config, now: () => aws.now, sink: lines.sink })();
  const parkedOld = () => aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: { ...standbyTags(), [KEYS.runnerVersion]: '2.338.0' } });

  it('reads the resolved release of a following pool and replaces a batch of parked instances of another version', async () => {
    store('2.339.0');
    const old = [parkedOld(), parkedOld(), parkedOld()];
    const [summary] = await run(fleetConfig({ warmSize: 3, runnerVersion: RUNNER_VERSION_LATEST }));
    expect(summary).toMatchObject({ evicted: { 'stale-runner': 2 }, launched: 2 });
    expect(old.filter((i) => i.state === 'terminated')).toHaveLength(2);
  });

  it('replaces nothing for a pinned pool, without a resolved release, or while the prime streak fails', async () => {
    const old = [parkedOld(), parkedOld()];
    expect((await run(fleetConfig({ warmSize: 2, runnerVersion: RUNNER_VERSION_LATEST })))[0]!.evicted).toEqual({});
    store('2.339.0');
    expect((await run(fleetConfig({ warmSize: 2, runnerVersion: '2.338.0' })))[0]!.evicted).toEqual({});
    const config = fleetConfig({ warmSize: 2, runnerVersion: RUNNER_VERSION_LATEST });
    const pool = config.pools[0]!;
    const failing = { ...freshStreak(`${pool.launchTemplateId}:${pool.launchTemplateVersion}`), failures: 1, lastFailureAt: aws.now.toISOString() };
    aws.parameters.set(paths.primeState(pool.name), { value: encodeStreak(failing), tags: {}, at: aws.now });
    expect((await run(config))[0]!.evicted).toEqual({});
    expect(old.every((i) => i.state === 'stopped')).toBe(true);
  });
});
