import { EC2Client } from '@aws-sdk/client-ec2';
import { SQSClient } from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createScaleUpHandler } from '../../lambdas/scale-up/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { decodeRunnerConfig, Provider, ssmPaths } from '../../lambdas/shared/contract';
import { seededRandom } from '../../local/fault-plan';
import { FakeCi } from '../support/fake-ci';
import { FakeAws } from '../support/fake-aws';
import { fleetConfig, INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX, standbyTags } from '../support/fixtures';
import { scaled } from '../support/slowdown';

/**
 * Claim contention: many scale-up invocations at once over one pool, against one fake AWS
 * and one counting CI provider. Counts, never times: the fake answers as fast as the
 * event loop lets it, and the invocations interleave at every await.
 */
let aws: FakeAws;
let ci: FakeCi;
let lines: Lines;

// Each invocation's id (a random UUID) salts its candidate order (decide.ts `orderCandidates`):
// drawn from the storm's seed instead, so a seed gives one interleaving and a failing storm repeats.
const ids = vi.hoisted(() => ({ next: undefined as (() => string) | undefined }));
vi.mock('node:crypto', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:crypto')>();
  return { ...actual, randomUUID: () => ids.next?.() ?? actual.randomUUID() };
});

beforeEach(() => {
  aws?.restore();
  aws = new FakeAws();
  ci = new FakeCi(Provider.GITHUB, PREFIX);
  lines = new Lines();
});
afterAll(() => aws.restore());

function handler() {
  return createScaleUpHandler({
    ec2: new EC2Client({}),
    ssm: new SSMClient({}),
    sqs: new SQSClient({}),
    // A bound well past any fake answer even on a loaded box: a storm of 40 invocations on
    // one event loop can starve a call past 1 s, which turned claims into unknown outcomes
    // and made the counts depend on the load (35 failures in one loaded run).
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(10_000) }),
    loadConfig: async () => fleetConfig({ maxRunners: 1_000 }),
    providers: () => ({ github: ci }),
    queueUrl: 'https://sqs.local/jobs.fifo',
    deadLetterQueueUrl: 'https://sqs.local/jobs-dlq.fifo',
    instanceArnPrefix: INSTANCE_ARN_PREFIX,
    now: () => aws.now,
    sink: lines.sink,
  });
}

/** `jobs` jobs in batches of `batch`, every batch its own invocation, all at once. */
async function storm(seed: number, parked: number, jobs: number, batch: number) {
  // The seed draws each fake answer's delay in event-loop turns and names the invocations
  // (their candidate orders): the same counts on every run, a failing storm repeats.
  const random = seededRandom(seed);
  aws.turns = () => Math.floor(random() * 20);
  let n = 0;
  ids.next = () => `00000000-0000-4000-8000-${(seed * 0x10000 + n++).toString(16).padStart(12, '0')}`;
  for (let i = 0; i < parked; i++) aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags() });
  const all = Array.from({ length: jobs }, (_, i) => job(i + 1));
  const batches = Array.from({ length: Math.ceil(jobs / batch) }, (_, b) => all.slice(b * batch, (b + 1) * batch));
  // Registrations and deletions per job, through the CI double.
  const registered = new Map<string, number>();
  const deleted = new Map<string, number>();
  const jobOf = new Map<string, string>();
  const create = ci.createRunner.bind(ci);
  const remove = ci.deleteRunner.bind(ci);
  ci.createRunner = async (j, instanceId, pool) => {
    const reg = await create(j, instanceId, pool);
    registered.set(j.jobId, (registered.get(j.jobId) ?? 0) + 1);
    jobOf.set(reg.runnerId, j.jobId);
    return reg;
  };
  ci.deleteRunner = async (runnerId) => {
    await remove(runnerId);
    const jobId = jobOf.get(runnerId)!;
    deleted.set(jobId, (deleted.get(jobId) ?? 0) + 1);
  };
  const results = await Promise.all(batches.map((b) => handler()(jobEvent(b))));
  const running = [...aws.instances.values()].filter((i) => i.state === 'running');
  const served = new Map<string, number>();
  for (const i of running) served.set(i.tags.get(KEYS.jobId)!, (served.get(i.tags.get(KEYS.jobId)!) ?? 0) + 1);
  return {
    failures: results.flatMap((r) => r.batchItemFailures).length,
    warm: running.filter((i) => i.tags.has(KEYS.warmStandby)).length,
    cold: running.filter((i) => !i.tags.has(KEYS.warmStandby)).length,
    served,
    // Invariant 1 on the instance itself: the config it will read is its own runner's (a
    // config written over another attempt's claim would hand it to a second job).
    notItsOwnConfig: running.filter((i) => {
      const p = aws.parameters.get(ssmPaths(PREFIX).runnerConfig(i.id));
      return p === undefined || (decodeRunnerConfig(p.value) as { jitConfig?: string }).jitConfig !== `jit-secret-${i.tags.get(KEYS.runnerId)}`;
    }).length,
    stillParked: [...aws.instances.values()].filter((i) => i.state === 'stopped' && !i.tags.has(KEYS.jobId)).length,
    maxRegistered: Math.max(...registered.values()),
    maxDeleted: Math.max(0, ...deleted.values()),
    registrations: [...registered.values()].reduce((s, n) => s + n, 0),
    deletions: [...deleted.values()].reduce((s, n) => s + n, 0),
    puts: aws.count('PutParameter'),
    refusedPuts: aws.refused.filter((a) => a === 'PutParameter').length,
  };
}

/** Issue 11 §5 ran each storm 20 times: 20 fixed seeds each. */
const SEEDS = Array.from({ length: 20 }, (_, i) => i + 1);

/**
 * SSM writes (PutParameter) per storm. Accepted writes are exactly one per served job (a warm
 * claim carries the config, no marker); the rest are claims refused on an instance another job
 * took, and vary with the interleaving: the 20 seeds give 380 to 444 and 86 to 126, the same on
 * every run (2026-12-02; with random invocation ids, 6 runs gave 395 to 458 and 84 to 139).
 * Bounds, so that a change of interleaving alone does not fail them.
 */
const PUT_BOUND = { big: 520, small: 170 } as const;

describe('scale-up under claim contention', () => {
  it.each(SEEDS)('seed %i: 200 jobs against 20 parked in 40 concurrent invocations: one registration per served job, none deleted, nothing served twice', async (seed) => {
    const r = await storm(seed, 20, 200, 5);
    expect(r.failures).toBe(0);
    expect(r.served.size).toBe(200);
    expect(Math.max(...r.served.values())).toBe(1);
    expect(r.notItsOwnConfig).toBe(0);
    expect(r.warm).toBe(20);
    // A job registers once and carries the registration past its refused claims to its next
    // candidate or its cold launch. Registering before every claim made 426 registrations
    // and 226 deletions of this storm; registering again after the first loss, 380 and 180.
    expect(r.maxRegistered).toBe(1);
    expect(r.registrations).toBe(200);
    expect(r.deletions).toBe(0);
    expect(ci.created - ci.deleted.length).toBe(200);
    expect(aws.parameters.size).toBe(200);
    expect(r.puts - r.refusedPuts).toBe(200);
    expect(r.puts).toBeLessThanOrEqual(PUT_BOUND.big);
  });

  it.each(SEEDS)('seed %i: 60 jobs against 60 parked in 20 concurrent invocations: every job goes warm, one registration each', async (seed) => {
    const r = await storm(seed, 60, 60, 3);
    expect(r.failures).toBe(0);
    expect(r.served.size).toBe(60);
    expect(Math.max(...r.served.values())).toBe(1);
    expect(r.notItsOwnConfig).toBe(0);
    expect(r.cold).toBe(0);
    expect(r.warm).toBe(60);
    expect(r.stillParked).toBe(0);
    expect(r.maxRegistered).toBe(1);
    expect(r.registrations).toBe(60);
    expect(r.deletions).toBe(0);
    expect(ci.created - ci.deleted.length).toBe(60);
    expect(aws.parameters.size).toBe(60);
    expect(r.puts - r.refusedPuts).toBe(60);
    expect(r.puts).toBeLessThanOrEqual(PUT_BOUND.small);
  });
});
