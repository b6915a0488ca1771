import { CreateTagsCommand, DeleteTagsCommand, EC2Client } from '@aws-sdk/client-ec2';
import { SQSClient } from '@aws-sdk/client-sqs';
import { SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createScaleUpHandler, type ScaleUpDeps, type ScaleUpOptions } from '../../lambdas/scale-up/handler';
import { scaled } from '../support/slowdown';
import { adoptWindowSeconds, earlierLiveSeconds, launchToken } from '../../lambdas/scale-up/cold-tokens';
import { CAPACITY_BACKOFF_CAP_SECONDS, WAIT_ATTRIBUTES } from '../../lambdas/scale-up/queue';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { Pacer } from '../../lambdas/shared/pacing';
import { encodeStreak, freshStreak, templateOf, type PrimeStreak } from '../../lambdas/pool/backoff';
import { buildFleetConfig, coldLaunchTags, decodeRunnerConfig, GitLabRunnerType, LATE_DELIVERY_SECONDS, LEDGER_MESSAGE, PARAMETER_INSTANCE_ARN_TAG, PARAMETER_INSTANCE_TAG, ssmPaths, LabelMatch, Provider, UNKNOWN_LAUNCH_REDELIVERY_SECONDS } from '../../lambdas/shared/contract';
import { FakeCi } from '../support/fake-ci';
import { awsError, FakeAws, lostAnswer } from '../support/fake-aws';
import { fleetConfig, INSTANCE_ARN_PREFIX, job, jobEvent, KEYS, Lines, PREFIX, record, sqsEvent, standbyTags } from '../support/fixtures';

const paths = ssmPaths(PREFIX);
const QUEUE = 'https://sqs.local/jobs.fifo';
const DLQ = 'https://sqs.local/jobs-dlq.fifo';

let aws: FakeAws;
let ci: FakeCi;
let lines: Lines;

// The in-process fake answers at once; a call it leaves hanging ends here. Scaled: on a loaded
// machine an answer can take longer than an unloaded one's bound.
const CALL_TIMEOUT_MS = scaled(200);

/** The handler under test; `wiring` replaces what a test needs of its own (a sink, a pacer, launch tickets). */
function handler(options: Partial<ScaleUpOptions> = {}, config = fleetConfig(), instanceArnPrefix = INSTANCE_ARN_PREFIX, now = () => aws.now, wiring: Partial<ScaleUpDeps> = {}) {
  return createScaleUpHandler({
    ec2: new EC2Client({}),
    ssm: new SSMClient({}),
    sqs: new SQSClient({}),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: CALL_TIMEOUT_MS }),
    loadConfig: async () => config,
    providers: () => ({ github: ci }),
    queueUrl: QUEUE,
    instanceArnPrefix,
    deadLetterQueueUrl: DLQ,
    now,
    random: () => 0.5,
    sink: lines.sink,
    options,
    ...wiring,
  });
}

function park(n: number): string[] {
  return Array.from({ length: n }, () => aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags() }).id);
}

function jobs(n: number) {
  return Array.from({ length: n }, (_, i) => job(i + 1));
}

const running = () => [...aws.instances.values()].filter((i) => i.state === 'running');
const warmStarted = () => running().filter((i) => i.tags.has(KEYS.warmStandby));
const coldLaunched = () => running().filter((i) => !i.tags.has(KEYS.warmStandby));

beforeEach(() => {
  aws?.restore();
  aws = new FakeAws();
  ci = new FakeCi(Provider.GITHUB, PREFIX);
  lines = new Lines();
});
afterAll(() => aws.restore());

describe('scale-up: latency ledger', () => {
  it('stamps dequeued, registered, claimed, instance-started (warm) and dequeued, launched, registered, instance-started (cold), in order, per job', async () => {
    park(1);
    // A clock that moves 10 ms per reading, so every stage has its own time.
    let tick = 0;
    const res = await handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => new Date(aws.now.getTime() + 10 * tick++))(jobEvent(jobs(2)));
    expect(res.batchItemFailures).toEqual([]);
    const ledger = lines.logs(LEDGER_MESSAGE);
    const of = (trace: string) => ledger.filter((l) => l.traceId === trace);
    // trace-1 went warm (the one parked instance), trace-2 cold.
    expect(of('trace-1').map((l) => l.stage)).toEqual(['dequeued', 'registered', 'claimed', 'instance-started']);
    expect(of('trace-2').map((l) => l.stage)).toEqual(['dequeued', 'launched', 'registered', 'instance-started']);
    for (const l of ledger) {
      expect(l).toMatchObject({ jobId: `github:${String(l.traceId).slice('trace-'.length)}`, pool: 'linux' });
      // Seconds since the delivery was received (fixtures: 11:59:00), to the millisecond of its time.
      expect(l.seconds).toBe((Date.parse(l.at as string) - Date.parse('2026-11-29T11:59:00.000Z')) / 1000);
    }
    for (const trace of ['trace-1', 'trace-2']) {
      const times = of(trace).map((l) => Date.parse(l.at as string));
      expect(times).toEqual([...times].sort((a, b) => a - b));
      expect(new Set(times).size).toBe(times.length);
    }
    // An EMF sample per line, per pool and stage.
    const samples = lines.lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((r) => 'JobStageSeconds' in r);
    expect(samples.map((r) => [r.Pool, r.Stage, r.JobStageSeconds])).toEqual(ledger.map((l) => ['linux', l.stage, l.seconds]));
  });
});

describe('scale-up: warm activation', () => {
  it('activates a batch with one observation, one CreateTags per instance and one StartInstances', async () => {
    const ids = park(3);
    const res = await handler()(jobEvent(jobs(3)));
    expect(res.batchItemFailures).toEqual([]);
    expect(warmStarted().map((i) => i.id).sort()).toEqual([...ids].sort());
    expect(aws.count('PutParameter')).toBe(3);
    expect(ci.created).toBe(3);
    expect(aws.count('CreateTags')).toBe(3);
    expect(aws.count('StartInstances')).toBe(1);
    // One observation; claims made right after it are tagged without re-observing.
    expect(aws.count('DescribeInstances')).toBe(1);
    for (const inst of warmStarted()) {
      const jobId = inst.tags.get(KEYS.jobId)!;
      const n = jobId.split(':')[1];
      expect(inst.tags.get(KEYS.traceId)).toBe(`trace-${n}`);
      expect(inst.tags.get(KEYS.activatedAt)).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      const param = aws.parameters.get(paths.runnerConfig(inst.id))!;
      expect(param.tags[PARAMETER_INSTANCE_TAG]).toBe(inst.id);
      expect(param.tags[PARAMETER_INSTANCE_ARN_TAG]).toBe(`${INSTANCE_ARN_PREFIX}${inst.id}`);
      const runnerId = inst.tags.get(KEYS.runnerId)!;
      expect(decodeRunnerConfig(param.value)).toEqual({ provider: Provider.GITHUB, instanceId: inst.id, jitConfig: `jit-secret-${runnerId}` });
    }
    expect(lines.metric('WarmActivations', { Pool: 'linux' })).toBe(3);
    expect(lines.metric('ColdLaunches')).toBe(0);
    // The secret never reaches a log line.
    expect(lines.lines.join('\n')).not.toContain('jit-secret');
    for (const l of lines.logs('warm activation started the instance')) expect(l.traceId).toMatch(/^trace-/);
  });

  it('writes one SSM parameter per warm activation without contention: the claim is the config itself', async () => {
    // PutParameter (about 3 a second) is the warm path's bottleneck: an uncontended job
    // must not spend a second write on a claim marker.
    const ids = park(5);
    expect((await handler()(jobEvent(jobs(5)))).batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(5);
    const { PutParameterCommand } = await import('@aws-sdk/client-ssm');
    const puts = aws.ssm.commandCalls(PutParameterCommand).map((c) => c.args[0].input);
    expect(puts.map((p) => p.Name).sort()).toEqual(ids.map((id) => paths.runnerConfig(id)).sort());
    for (const p of puts) {
      expect(p.Overwrite).toBe(false);
      expect(decodeRunnerConfig(p.Value!)).toMatchObject({ provider: Provider.GITHUB });
    }
    expect(ci.created).toBe(5);
    expect(ci.deleted).toHaveLength(0);
  });

  it('encrypts every config parameter with the fleet key when one is configured, warm and cold', async () => {
    park(1);
    const keyed = { ...fleetConfig(), parameters: { ...fleetConfig().parameters, kmsKeyId: 'arn:aws:kms:eu-west-1:111122223333:key/k-1' } };
    expect((await handler({}, keyed)(jobEvent(jobs(2)))).batchItemFailures).toEqual([]);
    const { PutParameterCommand } = await import('@aws-sdk/client-ssm');
    const keyIds = aws.ssm.commandCalls(PutParameterCommand).map((c) => c.args[0].input.KeyId);
    // Warm and cold: the config, written once each.
    expect(keyIds).toEqual(Array(2).fill('arn:aws:kms:eu-west-1:111122223333:key/k-1'));
  });

  it('serves jobs beyond the parked count cold, and a redelivered job not at all', async () => {
    park(1);
    const h = handler();
    expect((await h(jobEvent(jobs(2)))).batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(1);
    expect(coldLaunched()).toHaveLength(1);
    const before = aws.calls.length;
    expect((await h(jobEvent(jobs(2)))).batchItemFailures).toEqual([]);
    expect(aws.calls.slice(before)).toEqual(['DescribeInstances']);
    expect(lines.logs('job already has an instance')).toHaveLength(2);
  });

  it('a cold launch that fails after writing its config terminates the instance, deregisters the runner and deletes the config in the same run', async () => {
    aws.fault('CreateTags', awsError('InvalidParameterValue'));
    await handler()(jobEvent(jobs(1)));
    const launched = [...aws.instances.values()];
    expect(launched.map((i) => i.state)).toEqual(['terminated']);
    expect(ci.deleted).toHaveLength(1);
    expect(aws.count('PutParameter')).toBe(1);
    expect(aws.parameters.size).toBe(0);
  });

  it.each([
    [true, 0],
    [false, 1],
  ])('that config delete, its every answer lost, is read back with GetParameter (executed: %s)', async (executed, warnings) => {
    aws.fault('CreateTags', awsError('InvalidParameterValue'));
    aws.fault(
      'DeleteParameter',
      ...Array.from({ length: 6 }, () => (input: Record<string, unknown>) => {
        if (executed) aws.parameters.delete(input.Name as string);
        throw awsError('ServiceUnavailable', 503);
      }),
    );
    await handler()(jobEvent(jobs(1)));
    // One for the pool's prime back-off before the launch, one read-back.
    expect(aws.count('GetParameter')).toBe(2);
    expect(aws.parameters.size).toBe(executed ? 0 : 1);
    expect(lines.logs(/config parameter failed; the sweep removes it$/)).toHaveLength(warnings);
  });

  it('that config delete, one answer lost, is resent (the instance is terminated: nobody can claim its name again) and the parameter is gone', async () => {
    aws.fault('CreateTags', awsError('InvalidParameterValue'));
    aws.fault('DeleteParameter', awsError('ServiceUnavailable', 503));
    await handler()(jobEvent(jobs(1)));
    expect(aws.count('DeleteParameter')).toBe(2);
    expect(aws.parameters.size).toBe(0);
    expect(lines.logs(/config parameter failed; the sweep removes it$/)).toHaveLength(0);
  });

  it('moves to the next candidate when a claim is lost, carrying its runner registration there: one registration, one SSM write per claim', async () => {
    const [a, b] = park(2);
    // Another invocation owns the first candidate this one tries.
    aws.fault('PutParameter', awsError('ParameterAlreadyExists'));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(ci.created).toBe(1);
    expect(ci.deleted).toHaveLength(0);
    const { PutParameterCommand } = await import('@aws-sdk/client-ssm');
    const puts = aws.ssm.commandCalls(PutParameterCommand).map((c) => c.args[0].input);
    expect(puts.map((p) => p.Overwrite)).toEqual([false, false]);
    expect(warmStarted()).toHaveLength(1);
    const started = warmStarted()[0]!;
    expect([a, b]).toContain(started.id);
    // The config names the instance it is on (the boot script refuses any other's), with the
    // carried runner's secret; the runner id tag is the carried runner's.
    const config = decodeRunnerConfig(aws.parameters.get(paths.runnerConfig(started.id))!.value) as { instanceId: string; jitConfig: string };
    expect(config.instanceId).toBe(started.id);
    expect(config.jitConfig).toBe(`jit-secret-${started.tags.get(KEYS.runnerId)}`);
    expect(lines.metric('LostClaims')).toBe(1);
  });

  it('a job whose claims were all refused launches cold with the registration it carried; one that does not launch deletes it', async () => {
    const [only] = park(1);
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: 'other', tags: {}, at: aws.now });
      aws.instances.get(only!)!.tags.set(KEYS.activatedAt, '2026-11-29T11:59:59.000Z');
      throw awsError('ParameterAlreadyExists');
    });
    expect((await handler()(jobEvent(jobs(1)))).batchItemFailures).toEqual([]);
    expect(ci.created).toBe(1);
    expect(ci.deleted).toHaveLength(0);
    const [cold] = coldLaunched();
    expect(cold!.tags.get(KEYS.runnerId)).toBe('1');
    const config = decodeRunnerConfig(aws.parameters.get(paths.runnerConfig(cold!.id))!.value) as { instanceId: string; jitConfig: string };
    expect(config).toMatchObject({ instanceId: cold!.id, jitConfig: 'jit-secret-1' });

    // The same, but CreateFleet refuses: the carried registration is deleted, not left to the sweep.
    const [next] = park(1);
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: 'other', tags: {}, at: aws.now });
      aws.instances.get(next!)!.tags.set(KEYS.activatedAt, '2026-11-29T11:59:59.000Z');
      throw awsError('ParameterAlreadyExists');
    });
    aws.fault('CreateFleet', awsError('InvalidParameterValue'));
    expect((await handler()(jobEvent([job(2)]))).batchItemFailures).toHaveLength(1);
    expect(ci.created).toBe(2);
    expect(ci.deleted).toEqual(['2']);
  });

  it.each([
    ['deletes it before going cold', 0],
    ['whose delete fails leaves it for the sweep, counted as a rollback step that failed', 3],
  ])('a lane that throws while it carries a refused claim\'s registration %s', async (_, deleteFailures) => {
    park(2);
    aws.fault('PutParameter', awsError('ParameterAlreadyExists'));
    // Something no step expects throws in the lane between the refused claim and the next pick.
    const sink = (line: string) => {
      if (line.includes('claim lost to another invocation')) throw new Error('log sink broke');
      lines.sink(line);
    };
    // deleteRunner tries 3 times.
    ci.failDelete = deleteFailures;
    const h = handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => aws.now, { sink });
    expect((await h(jobEvent(jobs(1)))).batchItemFailures).toEqual([]);
    expect(lines.metric('Fallbacks', { Reason: 'activation-error' })).toBe(1);
    // The carried registration is deleted in the same run (or counted); the cold launch registers its own.
    expect(ci.created).toBe(2);
    expect(ci.deleted).toEqual(deleteFailures ? [] : ['1']);
    expect(ci.runners.has('1')).toBe(deleteFailures > 0);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(deleteFailures ? 1 : 0);
    expect(coldLaunched().map((i) => i.tags.get(KEYS.runnerId))).toEqual(['2']);
  });

  it.each([['past claimsPerJob', 2, 6]])('a job whose claims were all lost tries the parked instances a fresh observation still shows before going cold (%s)', async (_, claimsPerJob, n) => {
    const ids = park(n);
    // Other invocations win the first n - 1 claims and tag their instances at once.
    for (let k = 0; k < n - 1; k++) {
      aws.fault('PutParameter', (input) => {
        const id = paths.instanceIdOf(input.Name as string)!;
        aws.parameters.set(input.Name as string, { value: 'other', tags: {}, at: aws.now });
        aws.instances.get(id)!.tags.set(KEYS.activatedAt, '2026-11-29T11:59:59.000Z');
        throw awsError('ParameterAlreadyExists');
      });
    }
    const warm = { claimsPerJob, concurrency: 10, freshSnapshotMs: 2_000 };
    const res = await handler({ warm })(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(coldLaunched()).toHaveLength(0);
    expect(warmStarted()).toHaveLength(1);
    expect(ids).toContain(warmStarted()[0]!.id);
    expect(lines.metric('LostClaims')).toBe(n - 1);
  });

  it('a lane whose list ran dry (its re-observation failed) takes one more look before going cold', async () => {
    const [a] = park(1);
    let b: string | undefined;
    aws.fault('PutParameter', (input) => {
      // Another invocation takes the only candidate; meanwhile a new standby parks.
      aws.parameters.set(input.Name as string, { value: 'other', tags: {}, at: aws.now });
      aws.instances.get(a!)!.tags.set(KEYS.activatedAt, '2026-11-29T11:59:59.000Z');
      b = park(1)[0];
      throw awsError('ParameterAlreadyExists');
    });
    aws.fault('DescribeInstances', 'pass', awsError('UnauthorizedOperation'));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(coldLaunched()).toHaveLength(0);
    expect(warmStarted().map((i) => i.id)).toEqual([b]);
  });

  it('goes cold once a fresh observation shows no parked instance left, after a bounded number of looks', async () => {
    park(3);
    for (let k = 0; k < 3; k++) {
      aws.fault('PutParameter', (input) => {
        aws.parameters.set(input.Name as string, { value: 'other', tags: {}, at: aws.now });
        aws.instances.get(paths.instanceIdOf(input.Name as string)!)!.tags.set(KEYS.activatedAt, '2026-11-29T11:59:59.000Z');
        throw awsError('ParameterAlreadyExists');
      });
    }
    const res = await handler({ warm: { claimsPerJob: 1, concurrency: 10, freshSnapshotMs: 2_000 } })(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(coldLaunched()).toHaveLength(1);
    expect(lines.metric('Fallbacks', { Reason: 'lost-claims' })).toBe(1);
    // The first observation, one per lost claim, one that shows none left.
    expect(aws.count('DescribeInstances')).toBeLessThanOrEqual(5);
  });

  it('re-observes after a lost claim, so it does not probe instances others have taken meanwhile', async () => {
    const ids = park(6);
    // Each of the first two writes loses; meanwhile another invocation tagged four others.
    let losses = 0;
    const taken = () => {
      if (++losses === 1) for (const id of ids.slice(0, 4)) aws.instances.get(id)!.tags.set(KEYS.activatedAt, 'x');
      throw awsError('ParameterAlreadyExists');
    };
    aws.fault('PutParameter', taken);
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('DescribeInstances')).toBe(2);
    // The re-observation asks for stopped instances only (the candidates): a smaller answer to parse.
    const { DescribeInstancesCommand } = await import('@aws-sdk/client-ec2');
    const states = aws.ec2.commandCalls(DescribeInstancesCommand).map((c) => c.args[0].input.Filters?.find((f) => f.Name === 'instance-state-name')?.Values);
    expect(states[1]).toEqual(['stopped']);
    // After the refresh only the two untouched instances remain candidates.
    const claimedAfter = aws.ssm.commandCalls((await import('@aws-sdk/client-ssm')).PutParameterCommand).slice(1).map((c) => c.args[0].input.Name);
    for (const name of claimedAfter) expect(ids.slice(4).map((id) => paths.runnerConfig(id))).toContain(name);
    expect(warmStarted()).toHaveLength(1);
  });

  it('paced writes: picks its candidate after waiting for the write token, from a fresh observation', async () => {
    park(3);
    const sleep = async (ms: number) => void (aws.now = new Date(aws.now.getTime() + ms));
    const pacer = new Pacer({ PutParameter: { capacity: 1, refillPerSecond: 0.2 } }, () => aws.now.getTime(), sleep);
    const h = handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => aws.now, { aws: new AwsCaller({ sleep: async () => {}, pacer, timeoutMs: CALL_TIMEOUT_MS }) });
    expect((await h(jobEvent(jobs(2)))).batchItemFailures).toEqual([]);
    // The observation, then one re-observation for the pick that waited 5 s; no verification
    // (which would describe by instance id).
    expect(aws.count('DescribeInstances')).toBe(2);
    const { DescribeInstancesCommand } = await import('@aws-sdk/client-ec2');
    const byId = aws.ec2.commandCalls(DescribeInstancesCommand).filter((c) => c.args[0].input.Filters?.some((f) => f.Name === 'instance-id'));
    expect(byId).toHaveLength(0);
    expect(aws.count('PutParameter')).toBe(2);
    expect(warmStarted()).toHaveLength(2);
  });

  it('verifies a claim made long after the observation before tagging it', async () => {
    park(1);
    aws.fault('PutParameter', slowPut);
    expect((await handler()(jobEvent(jobs(1)))).batchItemFailures).toEqual([]);
    expect(aws.calls.filter((c) => c !== 'SendMessage')).toEqual(['DescribeInstances', 'PutParameter', 'DescribeInstances', 'CreateTags', 'StartInstances']);
    expect(warmStarted()).toHaveLength(1);
  });

  it('tags a claim that needed verifying at once, while the other lanes of the batch are still claiming', async () => {
    park(3);
    // The first claim is answered 10 s after its observation, so it is verified before its tag.
    // The second lane's write is held until that tag is written (or for 100 event-loop turns,
    // long enough for the verification and the tag, which answer at once here).
    let taggedMeanwhile: boolean | undefined;
    aws.fault('PutParameter', slowPut, async (input) => {
      for (let turn = 0; turn < 100 && aws.count('CreateTags') === 0; turn++) await new Promise((r) => setImmediate(r));
      taggedMeanwhile = aws.count('CreateTags') > 0;
      return landPut(input);
    });
    expect((await handler()(jobEvent(jobs(2)))).batchItemFailures).toEqual([]);
    // Otherwise the claimed instance stays untagged (parked, to every other invocation) until
    // the slowest lane of its batch is done.
    expect(taggedMeanwhile).toBe(true);
    expect(warmStarted()).toHaveLength(2);
    expect(lines.metric('LostClaims')).toBe(0);
  });

  it('moves on to another candidate in the same lane when verification finds the claim stale', async () => {
    const ids = park(2);
    let stale: string | undefined;
    aws.fault('PutParameter', (input) => {
      // Answered long after the pick; meanwhile the instance was started for another job.
      stale = paths.instanceIdOf(input.Name as string)!;
      const inst = aws.instances.get(stale)!;
      inst.state = 'running';
      inst.tags.set(KEYS.activatedAt, '2026-11-29T11:00:00.000Z');
      inst.tags.set(KEYS.jobId, 'github:999');
      return slowPut(input);
    });
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    const other = ids.find((id) => id !== stale)!;
    expect(aws.instances.get(other)!.tags.get(KEYS.jobId)).toBe('github:1');
    expect(aws.instances.get(other)!.state).toBe('running');
    expect(aws.instances.get(stale!)!.tags.get(KEYS.jobId)).toBe('github:999');
    expect(aws.parameters.has(paths.runnerConfig(stale!))).toBe(false);
    expect(coldLaunched()).toHaveLength(0);
    expect(lines.metric('LostClaims')).toBe(1);
  });

  it('resolves a claim write with an unknown outcome by reading the value back', async () => {
    park(1);
    aws.fault('PutParameter', (input) => {
      // The write lands, the answer is lost.
      aws.parameters.set(input.Name as string, { value: input.Value as string, tags: {}, at: aws.now });
      return new Promise(() => {});
    });
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('GetParameter')).toBe(1);
    expect(warmStarted()).toHaveLength(1);
    expect(ci.deleted).toEqual([]);
  });

  it('a claim whose answer is lost and whose write lands after the not-found read-back is resolved as ours, not left to the sweep', async () => {
    const [id] = park(1);
    let late: Record<string, unknown> | undefined;
    aws.fault('PutParameter', (input) => {
      // Still in flight: no answer, and not there yet.
      late = input;
      throw awsError('InternalServerError', 500);
    });
    aws.fault('GetParameter', () => {
      // The read finds nothing; the write lands right after it.
      aws.parameters.set(late!.Name as string, { value: late!.Value as string, tags: {}, at: aws.now });
      throw awsError('ParameterNotFound');
    });
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    // The resend is refused (the late write is there) and read back: ours.
    expect(warmStarted().map((i) => i.id)).toEqual([id]);
    expect(coldLaunched()).toHaveLength(0);
    expect([...aws.parameters.keys()]).toEqual([paths.runnerConfig(id!)]);
    expect(ci.created).toBe(1);
  });

  it('a resend refused for another reason (throttled past its retries) is read back too: the earlier lost write that landed is ours', async () => {
    const [id] = park(1);
    let late: Record<string, unknown> | undefined;
    aws.fault('PutParameter', (input) => {
      late = input;
      throw awsError('InternalServerError', 500);
    });
    aws.fault('GetParameter', () => {
      // Nothing yet at the first read; the first write lands right after it.
      aws.parameters.set(late!.Name as string, { value: late!.Value as string, tags: {}, at: aws.now });
      throw awsError('ParameterNotFound');
    });
    // The resend is throttled on every one of its attempts.
    aws.fault('PutParameter', ...Array.from({ length: 6 }, () => awsError('ThrottlingException')));
    expect((await handler()(jobEvent(jobs(1)))).batchItemFailures).toEqual([]);
    expect(warmStarted().map((i) => i.id)).toEqual([id]);
    expect(coldLaunched()).toHaveLength(0);
    expect([...aws.parameters.keys()]).toEqual([paths.runnerConfig(id!)]);
    expect(ci.created).toBe(1);
    expect(ci.deleted).toEqual([]);
  });

  it('treats an unknown claim whose value is not ours as lost', async () => {
    park(1);
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: 'someone-else', tags: {}, at: aws.now });
      throw awsError('InternalServerError', 500);
    });
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(0);
    expect(coldLaunched()).toHaveLength(1);
    expect([...aws.parameters.values()].map((p) => p.value)).toContain('someone-else');
    expect(lines.metric('Fallbacks', { Reason: 'lost-claims' })).toBe(1);
  });

  it('rejects a claim on an instance that is no longer parked (slow competitor) without touching its tags', async () => {
    const [id] = park(1);
    // Between observation and claim (long enough for a boot), another invocation activated it
    // and its boot consumed the config.
    aws.fault('PutParameter', (input) => {
      aws.now = new Date(aws.now.getTime() + 10_000);
      const inst = aws.instances.get(id!)!;
      inst.state = 'running';
      inst.tags.set(KEYS.activatedAt, '2026-11-29T11:00:00.000Z');
      inst.tags.set(KEYS.jobId, 'github:999');
      aws.parameters.set(input.Name as string, { value: input.Value as string, tags: {}, at: aws.now });
      return { Version: 1 };
    });
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    const inst = aws.instances.get(id!)!;
    expect(inst.tags.get(KEYS.jobId)).toBe('github:999');
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(false);
    expect(aws.count('StartInstances')).toBe(0);
    expect(coldLaunched()).toHaveLength(1);
    expect(ci.runners.size).toBe(1); // only the cold one is left registered
  });

  it('rejects a late claim on an instance that is running with its standby tags only (not parked, not activated)', async () => {
    const [id] = park(1);
    // Between observation and claim the standby was started without an activation (a
    // re-prime or an operator): only its state says it is no longer parked.
    aws.fault('PutParameter', (input) => {
      aws.now = new Date(aws.now.getTime() + 10_000);
      aws.instances.get(id!)!.state = 'running';
      aws.parameters.set(input.Name as string, { value: input.Value as string, tags: {}, at: aws.now });
      return { Version: 1 };
    });
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    const inst = aws.instances.get(id!)!;
    expect(inst.tags.has(KEYS.activatedAt)).toBe(false);
    expect(inst.tags.has(KEYS.jobId)).toBe(false);
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(false);
    expect(aws.count('StartInstances')).toBe(0);
    expect(coldLaunched()).toHaveLength(1);
    expect(ci.runners.size).toBe(1);
  });
});

/** A claim write that lands 10 s after the observation: the claim must be re-observed. */
function slowPut(input: Record<string, unknown>) {
  aws.now = new Date(aws.now.getTime() + 10_000);
  return landPut(input);
}

/** A claim write that lands (as the fake would answer it without a fault). */
function landPut(input: Record<string, unknown>) {
  if (aws.parameters.has(input.Name as string)) throw awsError('ParameterAlreadyExists');
  aws.parameters.set(input.Name as string, { value: input.Value as string, tags: {}, at: aws.now });
  return { Version: 1 };
}

describe('scale-up: fault injection on every activation step', () => {
  type Check = (ids: string[]) => void;
  const rolledBack: Check = (ids) => {
    for (const id of ids) {
      const inst = aws.instances.get(id)!;
      expect(inst.tags.has(KEYS.jobId)).toBe(false);
      expect(inst.tags.has(KEYS.traceId)).toBe(false);
      expect(inst.tags.has(KEYS.activatedAt)).toBe(false);
      expect(inst.tags.has(KEYS.runnerId)).toBe(false);
      expect(aws.parameters.has(paths.runnerConfig(id))).toBe(false);
    }
    // Every runner left registered belongs to an instance that serves the job.
    for (const r of ci.runners.values()) expect(running().some((i) => i.id === r.instanceId)).toBe(true);
  };

  const cases: { step: string; inject: () => void; reason: string; startedWarm: number }[] = [
    { step: 'createRunner', inject: () => (ci.failCreate = () => new Error('502 from GitHub')), reason: 'ci-error', startedWarm: 0 },
    { step: 'PutParameter refused', inject: () => aws.fault('PutParameter', awsError('AccessDeniedException')), reason: 'claim-error', startedWarm: 0 },
    {
      step: 'verify DescribeInstances (a claim made long after the observation)',
      inject: () => {
        aws.fault('PutParameter', slowPut);
        aws.fault('DescribeInstances', 'pass', awsError('UnauthorizedOperation'));
      },
      reason: 'verify-error',
      startedWarm: 0,
    },
    { step: 'CreateTags', inject: () => aws.fault('CreateTags', awsError('InvalidParameterValue')), reason: 'tag-error', startedWarm: 0 },
    { step: 'StartInstances refused', inject: () => aws.fault('StartInstances', awsError('InsufficientInstanceCapacity')), reason: 'start-failed', startedWarm: 0 },
    {
      step: 'StartInstances previous state running',
      inject: () => aws.fault('StartInstances', (i) => ({ StartingInstances: (i.InstanceIds as string[]).map((InstanceId) => ({ InstanceId, PreviousState: { Name: 'running' } })) })),
      reason: 'start-lost',
      startedWarm: 0,
    },
    {
      step: 'StartInstances unknown, describe fails',
      inject: () => {
        aws.fault('StartInstances', 'hang');
        aws.fault('DescribeInstances', 'pass', awsError('UnauthorizedOperation'));
      },
      reason: 'start-failed',
      startedWarm: 0,
    },
  ];

  it.each(cases)('$step: rolls back everything and launches cold', async ({ inject, reason, startedWarm }) => {
    const ids = park(1);
    inject();
    if (reason === 'ci-error') {
      // The cold launch registers too: let only the warm registration fail.
      let first = true;
      ci.failCreate = () => (first ? ((first = false), new Error('502 from GitHub')) : undefined);
    }
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(startedWarm);
    expect(coldLaunched()).toHaveLength(1);
    expect(lines.metric('Fallbacks', { Reason: reason })).toBe(1);
    if (reason !== 'start-lost') rolledBack(ids);
  });

  it('a lost start removes only our tags: another owner keeps its own', async () => {
    const [id] = park(1);
    aws.fault('StartInstances', (i) => {
      // Someone else started it and tagged it with different values after our tags.
      const inst = aws.instances.get(id!)!;
      inst.tags.set(KEYS.jobId, 'github:other');
      return { StartingInstances: (i.InstanceIds as string[]).map((InstanceId) => ({ InstanceId, PreviousState: { Name: 'running' } })) };
    });
    await handler()(jobEvent(jobs(1)));
    const inst = aws.instances.get(id!)!;
    expect(inst.tags.get(KEYS.jobId)).toBe('github:other');
    expect(inst.tags.has(KEYS.traceId)).toBe(false);
    expect(lines.metric('LostClaims')).toBe(1);
  });

  it.each([
    ['every attempt unanswered', 6],
    ['an earlier attempt of a tag call that then answered', 0],
  ])('a CreateTags that lands after the rollback removed the tags is observed and removed again (%s)', async (_, unanswered) => {
    const [id] = park(1);
    let late: { Key: string; Value: string }[] = [];
    // The call is sent, its answer never comes; it executes later, after the rollback's delete.
    for (let n = 0; n < unanswered; n++) {
      aws.fault('CreateTags', (i) => {
        late = i.Tags as typeof late;
        throw awsError('ServiceUnavailable', 503);
      });
    }
    if (unanswered === 0) {
      aws.fault('CreateTags', (i) => {
        late = i.Tags as typeof late;
        for (const t of late) aws.instances.get(id!)!.tags.set(t.Key, t.Value);
        return {};
      });
      aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    }
    aws.fault('DeleteTags', (i) => {
      const inst = aws.instances.get(id!)!;
      for (const t of i.Tags as { Key: string; Value: string }[]) if (inst.tags.get(t.Key) === t.Value) inst.tags.delete(t.Key);
      for (const t of late) inst.tags.set(t.Key, t.Value);
      return {};
    });
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(late.length).toBeGreaterThan(0);
    // Claimable again at once: a parked standby, no tags of ours, no parameter.
    rolledBack([id!]);
    expect(aws.instances.get(id!)!.state).toBe('stopped');
    expect(aws.count('DeleteTags')).toBe(2);
    expect(lines.logs(/^activation tags landed after their removal/)).toHaveLength(1);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(0);
  });

  it('a lane that throws rolls back its own attempt; the other lanes still start their instances', async () => {
    const ids = park(3);
    let bad: string | undefined;
    // The second tag call is refused after its claim and registration are made...
    aws.fault('CreateTags', 'pass', (i) => {
      bad = (i.Resources as string[])[0];
      throw awsError('UnauthorizedOperation');
    });
    // ...and something no step expects is thrown in the lane while its claim is held: here the log sink.
    const sink = (line: string) => {
      if (line.includes('tagging the claimed instance failed')) throw new Error('log sink broke');
      lines.sink(line);
    };
    const h = handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => aws.now, { sink });
    const res = await h(jobEvent(jobs(3)));
    expect(res.batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(2);
    expect(coldLaunched()).toHaveLength(1);
    expect(lines.metric('Fallbacks', { Reason: 'activation-error' })).toBe(1);
    // The throwing lane's instance is parked again, its claim released; nothing tagged is left unstarted.
    expect(aws.instances.get(bad!)!.state).toBe('stopped');
    rolledBack([bad!]);
    for (const id of ids) {
      const i = aws.instances.get(id)!;
      expect(i.tags.has(KEYS.jobId)).toBe(i.state === 'running');
    }
  });

  it('a rollback step that fails does not stop the others, and is counted', async () => {
    const [id] = park(1);
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    aws.fault('DeleteTags', awsError('UnauthorizedOperation'));
    ci.failDelete = 3;
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(false);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(1);
    expect(coldLaunched()).toHaveLength(1);
  });

  it('undoes newest first and releases the claim last: tags, registration, parameter', async () => {
    park(1);
    const original = ci.deleteRunner.bind(ci);
    ci.deleteRunner = async (id) => {
      aws.calls.push('deleteRunner');
      return original(id);
    };
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    await handler()(jobEvent(jobs(1)));
    const undo = aws.calls.filter((c) => ['DeleteTags', 'deleteRunner', 'DeleteParameter'].includes(c));
    expect(undo).toEqual(['DeleteTags', 'deleteRunner', 'DeleteParameter']);
  });

  it('a rollback whose parameter delete lost its answer does not send it again: a claim made meanwhile survives', async () => {
    // The delete landed and released the instance; another invocation claimed it before
    // the answer was lost. A blind resend would delete that live claim (and a config written
    // over it would then be free for a third claim: two owners).
    const [id] = park(1);
    const name = paths.runnerConfig(id!);
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    aws.fault(
      'DeleteParameter',
      lostAnswer(undefined, () => aws.parameters.set(name, { value: 'claiming=other\n', tags: {}, at: aws.now, type: 'SecureString' })),
    );
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.parameters.get(name)?.value).toBe('claiming=other\n');
    expect(aws.count('DeleteParameter')).toBe(1);
    expect(coldLaunched()).toHaveLength(1);
  });

  it('a parameter that cannot be deleted is counted, and the job still goes cold', async () => {
    const [id] = park(1);
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    aws.fault('DeleteParameter', awsError('AccessDeniedException'));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.instances.get(id!)!.tags.has(KEYS.jobId)).toBe(false);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(1);
    expect(lines.logs('deleting the config parameter failed')[0]).toMatchObject({ traceId: 'trace-1', instanceId: id });
    expect(coldLaunched()).toHaveLength(1);
  });

  it('splits a refused batch so only the failing instance goes cold', async () => {
    const ids = park(4);
    let bad: string | undefined;
    aws.fault('StartInstances', (i) => {
      bad = (i.InstanceIds as string[])[2];
      throw awsError('IncorrectInstanceState');
    });
    // The split halves: the half with the bad instance fails again, its halves succeed/fail.
    aws.fault('StartInstances', (i) => startOk(i.InstanceIds as string[]));
    aws.fault('StartInstances', () => {
      throw awsError('IncorrectInstanceState');
    });
    aws.fault('StartInstances', (i) => {
      expect(i.InstanceIds).toEqual([bad]);
      throw awsError('IncorrectInstanceState');
    });
    const res = await handler()(jobEvent(jobs(4)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('StartInstances')).toBe(5);
    expect(warmStarted()).toHaveLength(3);
    expect(warmStarted().map((i) => i.id)).not.toContain(bad);
    expect(coldLaunched()).toHaveLength(1);
    expect(ids).toContain(bad);
    expect(lines.metric('Fallbacks', { Reason: 'start-failed' })).toBe(1);
  });

  it('splits a batch refused for capacity with the 5xx status EC2 gives it, so only that instance goes cold', async () => {
    park(4);
    let bad: string | undefined;
    aws.fault('StartInstances', (i) => {
      bad = (i.InstanceIds as string[])[0];
      throw awsError('InsufficientInstanceCapacity', 500);
    });
    aws.fault('StartInstances', (i) => {
      expect(i.InstanceIds).toContain(bad);
      throw awsError('InsufficientInstanceCapacity', 500);
    });
    aws.fault('StartInstances', (i) => {
      expect(i.InstanceIds).toEqual([bad]);
      throw awsError('InsufficientInstanceCapacity', 500);
    });
    const res = await handler()(jobEvent(jobs(4)));
    expect(res.batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(3);
    expect(warmStarted().map((i) => i.id)).not.toContain(bad);
    expect(coldLaunched()).toHaveLength(1);
    expect(lines.metric('Fallbacks', { Reason: 'start-failed' })).toBe(1);
  });

  it('splits the retry of a start whose outcome was unknown when EC2 refuses it', async () => {
    park(4);
    let bad: string | undefined;
    // No answer: the outcome is unknown; describing shows all four still stopped.
    aws.fault('StartInstances', () => {
      throw awsError('InternalError', 500);
    });
    aws.fault('StartInstances', (i) => {
      bad = (i.InstanceIds as string[])[3];
      throw awsError('IncorrectInstanceState');
    });
    // The retry's halves: [a, b] start, [c, bad] is refused and split again.
    aws.fault('StartInstances', (i) => startOk(i.InstanceIds as string[]));
    aws.fault('StartInstances', () => {
      throw awsError('IncorrectInstanceState');
    });
    aws.fault('StartInstances', (i) => startOk(i.InstanceIds as string[]));
    aws.fault('StartInstances', (i) => {
      expect(i.InstanceIds).toEqual([bad]);
      throw awsError('IncorrectInstanceState');
    });
    const res = await handler()(jobEvent(jobs(4)));
    expect(res.batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(3);
    expect(warmStarted().map((i) => i.id)).not.toContain(bad);
    expect(coldLaunched()).toHaveLength(1);
    expect(aws.count('StartInstances')).toBe(6);
  });

  function startOk(ids: string[]) {
    return {
      StartingInstances: ids.map((id) => {
        aws.instances.get(id)!.state = 'running';
        return { InstanceId: id, PreviousState: { Name: 'stopped' } };
      }),
    };
  }

  it('resolves a start whose answer never came by describing: running means started', async () => {
    const ids = park(2);
    aws.fault('StartInstances', (i) => {
      startOk(i.InstanceIds as string[]);
      return new Promise(() => {});
    });
    const res = await handler()(jobEvent(jobs(2)));
    expect(res.batchItemFailures).toEqual([]);
    expect(warmStarted().map((i) => i.id).sort()).toEqual([...ids].sort());
    expect(aws.count('StartInstances')).toBe(1);
    expect(coldLaunched()).toHaveLength(0);
  });

  it('resolves a start whose answer never came by describing: still stopped means start again', async () => {
    park(1);
    aws.fault('StartInstances', 'hang');
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('StartInstances')).toBe(2);
    expect(warmStarted()).toHaveLength(1);
  });

  it('a retried start that finds the instance pending or running means our first start landed late: started, not lost', async () => {
    const [id] = park(1);
    aws.fault('StartInstances', 'hang', (i) => {
      // The first StartInstances executes only now, after the describe saw the instance stopped.
      aws.instances.get(id!)!.state = 'running';
      return { StartingInstances: (i.InstanceIds as string[]).map((x) => ({ InstanceId: x, PreviousState: { Name: 'pending' }, CurrentState: { Name: 'running' } })) };
    });
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('StartInstances')).toBe(2);
    expect(warmStarted().map((i) => i.id)).toEqual([id]);
    expect(coldLaunched()).toHaveLength(0);
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(true);
  });

  it('retries throttling instead of failing the job', async () => {
    park(2);
    aws.fault('StartInstances', awsError('RequestLimitExceeded', 503), awsError('RequestLimitExceeded', 503));
    aws.fault('PutParameter', awsError('ThrottlingException'));
    aws.fault('DescribeInstances', awsError('RequestLimitExceeded', 503));
    const res = await handler()(jobEvent(jobs(2)));
    expect(res.batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(2);
    expect(aws.count('StartInstances')).toBe(3);
  });
});

describe('scale-up: a rollback whose activation tags stay on the instance', () => {
  const ACTIVATION = [KEYS.jobId, KEYS.traceId, KEYS.activatedAt, KEYS.runnerId];
  const ours = (id: string) => ACTIVATION.filter((k) => aws.instances.get(id)!.tags.has(k));

  /** Each of the 3 rounds' DeleteTags is answered, and a late CreateTags of ours lands after it. */
  function tagsKeepLanding(id: string): void {
    let late: { Key: string; Value: string }[] = [];
    aws.fault('CreateTags', (i) => {
      late = i.Tags as typeof late;
      for (const t of late) aws.instances.get(id)!.tags.set(t.Key, t.Value);
      return {};
    });
    for (let round = 0; round < 3; round++) {
      aws.fault('DeleteTags', (i) => {
        const inst = aws.instances.get(id)!;
        for (const t of i.Tags as typeof late) if (inst.tags.get(t.Key) === t.Value) inst.tags.delete(t.Key);
        for (const t of late) inst.tags.set(t.Key, t.Value);
        return {};
      });
    }
  }
  const refused = () => aws.fault('DeleteTags', awsError('UnauthorizedOperation'));
  // Six attempts (WRITE_IDEMPOTENT), none executed, every answer a 503.
  const neverAnswered = (action: string) => () => aws.fault(action, ...Array.from({ length: 6 }, () => awsError('ServiceUnavailable', 503)));

  it.each([
    ['refused', refused],
    ['answered, with a late CreateTags landing after each of its 3 rounds', null],
    ['unanswered on every attempt', neverAnswered('DeleteTags')],
  ])('DeleteTags %s: the instance is terminated, then the claim released; the job goes cold', async (_, inject) => {
    const [id] = park(1);
    if (inject) inject();
    else tagsKeepLanding(id!);
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    // Never a stopped standby that looks activated: it is gone, and its claim with it.
    expect(aws.instances.get(id!)!.state).toBe('terminated');
    expect(ours(id!).length).toBeGreaterThan(0);
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(false);
    expect(aws.count('TerminateInstances')).toBe(1);
    expect(lines.logs(/the instance is terminated instead/)).toHaveLength(1);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(0);
    expect(lines.metric('Fallbacks', { Reason: 'start-failed' })).toBe(1);
    expect(coldLaunched()).toHaveLength(1);
    expect([...ci.runners.values()].map((r) => r.instanceId)).toEqual([coldLaunched()[0]!.id]);
  });

  it('a DeleteTags that landed with every answer lost is looked at: our tags are gone, so the instance parks again (not terminated)', async () => {
    const [id] = park(1);
    aws.fault('DeleteTags', ...Array.from({ length: 6 }, () => lostAnswer()));
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.instances.get(id!)!.state).toBe('stopped');
    expect(ours(id!)).toEqual([]);
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(false);
    expect(aws.count('TerminateInstances')).toBe(0);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(0);
  });

  it('a DescribeInstances that fails after the DeleteTags is no sign the tags are gone: the instance is retired, not released with our tags on it', async () => {
    const [id] = park(1);
    // The delete is answered, but a late CreateTags of ours lands after it, and the look that would see it fails.
    aws.fault('DeleteTags', () => {
      aws.fault('DescribeInstances', awsError('UnauthorizedOperation'));
      return {};
    });
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(ours(id!).length).toBeGreaterThan(0);
    expect(lines.logs(/looking at the activation tags failed/)).toHaveLength(1);
    expect(aws.instances.get(id!)!.state).toBe('terminated');
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(false);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(0);
  });

  it('a TerminateInstances whose every answer is lost is resolved by the instance\'s state: terminated, the claim released', async () => {
    const [id] = park(1);
    refused();
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    aws.fault('TerminateInstances', ...Array.from({ length: 6 }, () => lostAnswer()));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.instances.get(id!)!.state).toBe('terminated');
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(false);
    expect(lines.logs(/terminating the instance gave no answer or failed/)).toHaveLength(1);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(0);
    expect(coldLaunched()).toHaveLength(1);
  });

  it.each([
    ['refused', () => aws.fault('TerminateInstances', awsError('UnauthorizedOperation'))],
    ['unanswered on every attempt, never landing', neverAnswered('TerminateInstances')],
    [
      'refused, its state unreadable',
      () =>
        aws.fault('TerminateInstances', () => {
          aws.fault('DescribeInstances', awsError('UnauthorizedOperation'));
          throw awsError('UnauthorizedOperation');
        }),
    ],
  ])('TerminateInstances %s too: the claim stays (no other job takes the half-activated instance), counted incomplete', async (_, inject) => {
    const [id] = park(1);
    refused();
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    inject();
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.instances.get(id!)!.state).toBe('stopped');
    expect(ours(id!).length).toBeGreaterThan(0);
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(true);
    expect(lines.logs(/the claim stays for the sweep/)).toHaveLength(1);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(1);
    // The registration still goes; the job is served cold.
    expect([...ci.runners.values()].map((r) => r.instanceId)).toEqual([coldLaunched()[0]!.id]);
  });

  it('never terminates an instance someone else started (start-lost): our claim is released, counted incomplete', async () => {
    const [id] = park(1);
    aws.fault('StartInstances', (i) => {
      aws.instances.get(id!)!.state = 'running';
      return { StartingInstances: (i.InstanceIds as string[]).map((InstanceId) => ({ InstanceId, PreviousState: { Name: 'running' } })) };
    });
    refused();
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.instances.get(id!)!.state).toBe('running');
    expect(aws.count('TerminateInstances')).toBe(0);
    expect(aws.parameters.has(paths.runnerConfig(id!))).toBe(false);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(1);
    expect(lines.metric('Fallbacks', { Reason: 'start-lost' })).toBe(1);
  });
});

describe('scale-up: cold launch', () => {
  it('tags the job and trace at launch, writes the config, tags the runner id', async () => {
    await handler()(jobEvent([job(7)]));
    const [inst] = coldLaunched();
    expect(inst!.tags.get(KEYS.jobId)).toBe('github:7');
    expect(inst!.tags.get(KEYS.traceId)).toBe('trace-7');
    expect(inst!.tags.get(KEYS.createdBy)).toBe('scale-up');
    expect(inst!.tags.get(KEYS.runnerId)).toBeDefined();
    expect(aws.parameters.get(paths.runnerConfig(inst!.id))!.tags[PARAMETER_INSTANCE_TAG]).toBe(inst!.id);
    expect(aws.parameters.get(paths.runnerConfig(inst!.id))!.tags[PARAMETER_INSTANCE_ARN_TAG]).toBe(`${INSTANCE_ARN_PREFIX}${inst!.id}`);
    const fleet = aws.ec2.commandCalls((await import('@aws-sdk/client-ec2')).CreateFleetCommand)[0]!.args[0].input;
    expect(fleet.Type).toBe('instant');
    expect(fleet.TargetCapacitySpecification?.DefaultTargetCapacityType).toBe('on-demand');
  });

  it.each([
    ['launched, answer lost', true, 1],
    ['not launched, answer lost', false, 2],
  ])('a CreateFleet whose answer was lost is found by its token before it is sent again (%s)', async (_, executed, sends) => {
    aws.fault('CreateFleet', executed ? lostAnswer() : awsError('ServiceUnavailable', 503));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('CreateFleet')).toBe(sends);
    // One instance for the job, serving it: no second launch left behind.
    expect([...aws.instances.values()]).toHaveLength(1);
    expect(coldLaunched()).toHaveLength(1);
    expect(coldLaunched()[0]!.tags.get(KEYS.runnerId)).toBeDefined();
  });

  it("a launch whose answer and token look-up were both lost is taken over by the message's next receive, not launched again", async () => {
    // Receive 1: the observation and the back-off's look at gone instances answer; CreateFleet
    // runs and its answer is lost; the look-up by its token fails.
    aws.fault('DescribeInstances', 'pass', 'pass', awsError('UnauthorizedOperation'));
    aws.fault('CreateFleet', lostAnswer());
    const first = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'msg-1', receiveCount: 1 })));
    expect(first.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(aws.count('DescribeInstances')).toBe(3);
    const [launched] = [...aws.instances.values()];
    expect(launched!.tags.has(KEYS.runnerId)).toBe(false);
    expect(ci.created).toBe(0);
    // Receive 2 (SQS redelivers) a while later: its own token is new, the first receive's is looked up.
    aws.now = new Date(aws.now.getTime() + 100_000);
    const second = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'msg-1', receiveCount: 2 })));
    expect(second.batchItemFailures).toEqual([]);
    expect(aws.count('CreateFleet')).toBe(1);
    expect([...aws.instances.values()].map((i) => i.id)).toEqual([launched!.id]);
    expect(launched!.tags.get(KEYS.runnerId)).toBe('1');
    expect(decodeRunnerConfig(aws.parameters.get(paths.runnerConfig(launched!.id))!.value)).toMatchObject({ instanceId: launched!.id, jitConfig: 'jit-secret-1' });
    expect(lines.logs('taking over the instance an earlier receive of the message launched, instead of launching')[0]).toMatchObject({ instanceId: launched!.id, receiveCount: 2 });
    expect(lines.metric('ColdLaunches')).toBe(1);
    // The ledger's launched stamp is when EC2 launched the instance, not when it was taken over.
    const stamps = lines.logs(LEDGER_MESSAGE).filter((l) => l.stage === 'launched');
    expect(stamps.map((l) => Date.parse(l.at as string))).toEqual([launched!.launchTime.getTime()]);
    expect(launched!.launchTime.getTime()).toBeLessThan(aws.now.getTime());
  });

  it("a redelivery whose look-up of the earlier receives' launches fails launches nothing; the message is retried", async () => {
    // The observation answers; the look-up, before the cold gate, fails.
    aws.fault('DescribeInstances', 'pass', awsError('UnauthorizedOperation'));
    const res = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'msg-1', receiveCount: 3 })));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(aws.count('CreateFleet')).toBe(0);
    expect(aws.instances.size).toBe(0);
    expect(ci.created).toBe(0);
    expect(lines.metric('JobsFailed', { Reason: 'cold-launch' })).toBe(1);
    // One filter holding both earlier receives' tokens.
    const { DescribeInstancesCommand } = await import('@aws-sdk/client-ec2');
    const lookUp = aws.ec2.commandCalls(DescribeInstancesCommand).at(-1)!.args[0].input.Filters!.find((f) => f.Name === `tag:${KEYS.launchToken}`);
    expect(lookUp!.Values).toEqual([1, 2].map((r) => launchToken({ messageId: 'msg-1', receiveCount: r }, 'on-demand')));
  });

  it('a redelivery does not take over an earlier instance that has a runner (another runner for the job was asked for)', async () => {
    const token = launchToken({ messageId: 'msg-1', receiveCount: 1 }, 'on-demand');
    const earlier = aws.addInstance({ state: 'running', tags: { ...Object.fromEntries(coldLaunchTags(KEYS, 'linux', job(1), aws.now, token).map((t) => [t.Key, t.Value])), [KEYS.runnerId]: '77' } });
    // The plan would call the job served by it: here the instance is gone from the observation.
    aws.fault('DescribeInstances', () => ({ Reservations: [] }));
    const res = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'msg-1', receiveCount: 2 })));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('CreateFleet')).toBe(1);
    expect(coldLaunched().filter((i) => i.id !== earlier.id)).toHaveLength(1);
    expect(earlier.tags.get(KEYS.runnerId)).toBe('77');
  });

  it("a redelivery does not take over an earlier instance launched near the end of its config wait, nor launch beside it: the message comes back when that wait has ended", async () => {
    const token = launchToken({ messageId: 'msg-1', receiveCount: 1 }, 'on-demand');
    // Launched exactly the take-over window ago: its boot may be in its last poll or ending.
    const launchTime = new Date(aws.now.getTime() - adoptWindowSeconds({}) * 1000);
    const earlier = aws.addInstance({ state: 'running', launchTime, tags: Object.fromEntries(coldLaunchTags(KEYS, 'linux', job(1), launchTime, token).map((t) => [t.Key, t.Value])) });
    const res = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'msg-1', receiveCount: 2 })));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(aws.count('CreateFleet')).toBe(0);
    expect(earlier.tags.has(KEYS.runnerId)).toBe(false);
    expect(aws.parameters.has(paths.runnerConfig(earlier.id))).toBe(false);
    expect(ci.created).toBe(0);
    expect(lines.logs('taking over the instance an earlier receive of the message launched, instead of launching')).toHaveLength(0);
    const { ChangeMessageVisibilityCommand } = await import('@aws-sdk/client-sqs');
    const hidden = aws.sqs.commandCalls(ChangeMessageVisibilityCommand).map((c) => c.args[0].input.VisibilityTimeout);
    expect(hidden).toEqual([earlierLiveSeconds({}) - adoptWindowSeconds({})]);
    expect(lines.metric('JobsFailed', { Reason: 'cold-earlier-launch' })).toBe(1);
  });

  it('a redelivery launches its own once an earlier instance is past its boot and config wait (left to the no-runner rule)', async () => {
    const token = launchToken({ messageId: 'msg-1', receiveCount: 1 }, 'on-demand');
    const launchTime = new Date(aws.now.getTime() - earlierLiveSeconds({}) * 1000);
    const earlier = aws.addInstance({ state: 'running', launchTime, tags: Object.fromEntries(coldLaunchTags(KEYS, 'linux', job(1), launchTime, token).map((t) => [t.Key, t.Value])) });
    const res = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'msg-1', receiveCount: 2 })));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('CreateFleet')).toBe(1);
    expect(coldLaunched().filter((i) => i.id !== earlier.id && i.tags.get(KEYS.runnerId) === '1')).toHaveLength(1);
  });

  it('falls back from spot to on-demand on a capacity error', async () => {
    aws.fault('CreateFleet', () => ({ Instances: [], Errors: [{ ErrorCode: 'InsufficientInstanceCapacity' }] }));
    const res = await handler({}, fleetConfig({ spot: true }))(jobEvent([job(1)]));
    expect(res.batchItemFailures).toEqual([]);
    const { CreateFleetCommand } = await import('@aws-sdk/client-ec2');
    const calls = aws.ec2.commandCalls(CreateFleetCommand).map((c) => c.args[0].input.TargetCapacitySpecification?.DefaultTargetCapacityType);
    expect(calls).toEqual(['spot', 'on-demand']);
    expect(lines.metric('Fallbacks', { Reason: 'spot-capacity' })).toBe(1);
  });

  it('a spot resend answered with no instance after a lost answer is unknown: no on-demand launch beside it, the message comes back inside the take-over window', async () => {
    aws.fault('CreateFleet', awsError('ServiceUnavailable', 503), () => ({ Instances: [], Errors: [{ ErrorCode: 'InsufficientInstanceCapacity' }] }));
    const res = await handler({}, fleetConfig({ spot: true }))(jobEvent([job(1)]));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    const { CreateFleetCommand } = await import('@aws-sdk/client-ec2');
    const calls = aws.ec2.commandCalls(CreateFleetCommand).map((c) => c.args[0].input.TargetCapacitySpecification?.DefaultTargetCapacityType);
    expect(calls).toEqual(['spot', 'spot']);
    expect(lines.metric('Fallbacks', { Reason: 'spot-capacity' })).toBe(0);
    const { ChangeMessageVisibilityCommand } = await import('@aws-sdk/client-sqs');
    expect(aws.sqs.commandCalls(ChangeMessageVisibilityCommand).map((c) => c.args[0].input)).toEqual([expect.objectContaining({ ReceiptHandle: 'rh-msg-1', VisibilityTimeout: UNKNOWN_LAUNCH_REDELIVERY_SECONDS })]);
  });

  it('an unknown launch outcome shortens the visibility on the first receive only (an outage does not spend the receives 30 s apart)', async () => {
    aws.fault('CreateFleet', awsError('ServiceUnavailable', 503), awsError('ServiceUnavailable', 503), awsError('ServiceUnavailable', 503));
    const res = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'msg-1', receiveCount: 2 })));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    const { ChangeMessageVisibilityCommand } = await import('@aws-sdk/client-sqs');
    expect(aws.sqs.commandCalls(ChangeMessageVisibilityCommand)).toHaveLength(0);
  });

  it('fails the message when nothing launches, and on a config failure terminates what it launched', async () => {
    aws.fault('CreateFleet', () => ({ Instances: [], Errors: [{ ErrorCode: 'InvalidLaunchTemplateId.NotFound' }] }));
    let res = await handler()(jobEvent([job(1)]));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    aws.fault('PutParameter', awsError('AccessDeniedException'));
    res = await handler()(jobEvent([job(2)]));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-2' }]);
    expect([...aws.instances.values()].map((i) => i.state)).toEqual(['terminated']);
    expect(ci.runners.size).toBe(0);
    expect(lines.metric('JobsFailed', { Reason: 'cold-config' })).toBe(1);
  });
});

describe('scale-up: the instance ARN prefix', () => {
  it('refuses to build a handler from a missing or malformed prefix, naming the value', () => {
    for (const bad of ['', 'arn:aws:ec2:us-east-1:123456789012:instance', 'arn:aws:ec2:us-east-1:1234:instance/']) {
      expect(() => handler({}, fleetConfig(), bad), bad).toThrow(/instance ARN prefix|12-digit/);
    }
  });
});

describe('scale-up: the queue', () => {
  it('dead-letters a malformed message with a log line and a metric, and deletes it', async () => {
    const res = await handler()(sqsEvent(record('{"not":"a job"}', { id: 'bad' })));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.sent).toHaveLength(1);
    expect(aws.sent[0]).toMatchObject({ queueUrl: DLQ, body: '{"not":"a job"}', attributes: { [WAIT_ATTRIBUTES.reason]: 'malformed' } });
    expect(lines.logs('job dead-lettered')[0]).toMatchObject({ reason: 'malformed', level: 'error' });
    expect(lines.metric('JobsDeadLettered', { Reason: 'malformed' })).toBe(1);
  });

  it('keeps a malformed message in the queue when the dead-letter queue cannot take it', async () => {
    aws.fault('SendMessage', awsError('AccessDenied'));
    const res = await handler()(sqsEvent(record('nope', { id: 'bad' })));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'bad' }]);
  });

  it('re-queues a job that waits for capacity as a fresh copy, without failing the message', async () => {
    aws.addInstance({ state: 'running', tags: { [KEYS.pool]: 'linux', [KEYS.jobId]: 'github:100', [KEYS.runnerId]: '9', [KEYS.activatedAt]: 'x' } });
    const res = await handler({}, fleetConfig({ maxRunners: 1, warmSize: 0 }))(jobEvent([job(1)]));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.sent).toHaveLength(1);
    const copy = aws.sent[0]!;
    expect(copy.queueUrl).toBe(QUEUE);
    expect(copy.attributes[WAIT_ATTRIBUTES.waits]).toBe('1');
    expect(Date.parse(copy.attributes[WAIT_ATTRIBUTES.notBefore]!)).toBeGreaterThan(aws.now.getTime());
    expect(lines.metric('JobsWaitingForCapacity')).toBe(1);
    expect(lines.metric('JobsFailed')).toBe(0);
  });

  it('a paused pool (maxRunners 0) registers and launches nothing, not even on a parked standby: each job waits as a delayed copy', async () => {
    park(1);
    const res = await handler({}, fleetConfig({ maxRunners: 0, warmSize: 3 }))(jobEvent([job(1), job(2)]));
    expect(res.batchItemFailures).toEqual([]);
    expect(ci.created).toBe(0);
    expect(aws.count('StartInstances') + aws.count('CreateFleet') + aws.count('RunInstances') + aws.count('PutParameter')).toBe(0);
    expect(aws.sent.map((s) => [s.queueUrl, s.attributes[WAIT_ATTRIBUTES.waits]])).toEqual([
      [QUEUE, '1'],
      [QUEUE, '1'],
    ]);
    // Delayed, not spinning: each copy is hidden until its capacity back-off has passed.
    for (const copy of aws.sent) expect(Date.parse(copy.attributes[WAIT_ATTRIBUTES.notBefore]!)).toBeGreaterThan(aws.now.getTime());
    expect(lines.metric('JobsWaitingForCapacity')).toBe(2);
  });

  it('hides a wait copy that arrives before its time, and dead-letters one past the maximum age', async () => {
    const early = record(JSON.stringify(job(1)), { id: 'early', attributes: { [WAIT_ATTRIBUTES.waits]: '2', [WAIT_ATTRIBUTES.notBefore]: new Date(aws.now.getTime() + 30_000).toISOString() } });
    let res = await handler()(sqsEvent(early));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'early' }]);
    expect(aws.visibility).toEqual([{ receiptHandle: 'rh-early', seconds: 30 }]);
    expect(aws.count('DescribeInstances')).toBe(0);

    aws.addInstance({ state: 'running', tags: { [KEYS.pool]: 'linux', [KEYS.jobId]: 'github:100', [KEYS.runnerId]: '9', [KEYS.activatedAt]: 'x' } });
    const old = job(2, { receivedAt: '2026-11-29T09:00:00.000Z' });
    res = await handler({ maxWaitSeconds: 3600 }, fleetConfig({ maxRunners: 1, warmSize: 0 }))(sqsEvent(record(JSON.stringify(old), { id: 'old', attributes: { [WAIT_ATTRIBUTES.waits]: '9' } })));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.sent.map((s) => [s.queueUrl, s.attributes[WAIT_ATTRIBUTES.reason]])).toEqual([[DLQ, 'max-wait']]);
    expect(lines.metric('JobsDeadLettered', { Reason: 'max-wait' })).toBe(1);
  });

  it('drops a retried job that is no longer queued at the provider', async () => {
    park(1);
    ci.notQueued.add('github:1');
    const res = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'r', receiveCount: 2 })));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.count('DescribeInstances')).toBe(0);
    expect(ci.created).toBe(0);
  });

  it('asks the provider about a late delivery (a job created before the dedup window) and serves it only while queued', async () => {
    park(2);
    const lateBy = (LATE_DELIVERY_SECONDS + 1) * 1000;
    const created = (ms: number) => new Date(aws.now.getTime() - ms).toISOString();
    // A resent hook event of a job that finished days ago, one of a job still waiting, one fresh.
    ci.notQueued.add('github:1');
    const res = await handler()(jobEvent([job(1, { createdAt: created(4 * 86_400_000) }), job(2, { createdAt: created(lateBy) }), job(3, { createdAt: created(1000) })]));
    expect(res.batchItemFailures).toEqual([]);
    // Two lookups (the late ones), none for the fresh one; the finished job gets no runner.
    expect(ci.lookups).toBe(2);
    expect(ci.created).toBe(2);
    expect(warmStarted()).toHaveLength(2);
    expect(lines.logs('job no longer queued at the provider, dropping it').map((l) => l.jobId)).toEqual(['github:1']);
  });

  it('fails, logs and counts a job the provider answers 404 for, from isJobQueued and from resolveLabels; never drops it', async () => {
    park(2);
    ci.lookupNotFound.add('github:1');
    ci.lookupNotFound.add('github:2');
    const unresolved = job(2, { labels: [], labelsResolved: false });
    delete (unresolved as { pool?: string }).pool;
    const res = await handler()(sqsEvent(record(JSON.stringify(job(1)), { id: 'retried', receiveCount: 2 }), record(JSON.stringify(unresolved), { id: 'unresolved' })));
    expect(res.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(['retried', 'unresolved']);
    expect(ci.lookups).toBe(2);
    // Nothing deleted, nothing dead-lettered by hand: the redrive policy's budget applies.
    expect(aws.sent).toEqual([]);
    expect(ci.created).toBe(0);
    const logged = lines.logs('the CI provider would not show the job; the message will be retried');
    expect(logged.map((l) => [l.jobId, l.reason])).toEqual(
      expect.arrayContaining([
        ['github:1', 'not-found'],
        ['github:2', 'not-found'],
      ]),
    );
    expect(lines.metric('JobsFailed', { Reason: 'job-lookup-not-found' })).toBe(2);
  });

  it('retries every message when the instances cannot be observed', async () => {
    aws.fault('DescribeInstances', awsError('UnauthorizedOperation'));
    const res = await handler()(jobEvent(jobs(2)));
    expect(res.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(['msg-1', 'msg-2']);
  });

  it('resolves the pool of a job queued without labels', async () => {
    park(1);
    const j = job(1, { labels: [], labelsResolved: false });
    delete (j as { pool?: string }).pool;
    ci.labels.set('github:1', ['self-hosted', 'linux']);
    expect((await handler()(jobEvent([j]))).batchItemFailures).toEqual([]);
    expect(warmStarted()).toHaveLength(1);
    ci.labels.set('github:2', ['gpu']);
    const k = job(2, { labels: [], labelsResolved: false });
    delete (k as { pool?: string }).pool;
    expect((await handler()(jobEvent([k]))).batchItemFailures).toEqual([]);
    expect(aws.sent[0]!.attributes[WAIT_ATTRIBUTES.reason]).toBe('no-pool');
  });

  it('resolves the pool by the webhook rules: an exact match wins over an earlier subset pool, self-hosted is optional', async () => {
    const base = fleetConfig();
    const linux = base.pools[0]!;
    const config = { ...base, pools: [{ ...linux, name: 'wide', labels: ['linux', 'x64'], labelMatch: LabelMatch.SUBSET as const }, linux] };
    aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags('wide') });
    const exact = aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags('linux') }).id;
    const unresolved = (n: number) => {
      const j = job(n, { labels: [], labelsResolved: false });
      delete (j as { pool?: string }).pool;
      return j;
    };
    ci.labels.set('github:1', ['self-hosted', 'Linux']);
    expect((await handler({}, config)(jobEvent([unresolved(1)]))).batchItemFailures).toEqual([]);
    expect(warmStarted().map((i) => i.id)).toEqual([exact]);
    ci.labels.set('github:2', ['windows']);
    expect((await handler({}, config)(jobEvent([unresolved(2)]))).batchItemFailures).toEqual([]);
    expect(aws.sent[0]!.attributes[WAIT_ATTRIBUTES.reason]).toBe('no-pool');
    expect(String(lines.logs('job dead-lettered')[0]?.detail)).toContain('not-self-hosted');
  });
});

describe('scale-up: a registration carried to the cold gate that throws', () => {
  // The one parked instance is taken by another invocation first: the job falls back cold
  // carrying its registration ('1'). Parked two hours ago: it proves nothing about the template
  // since the failure below.
  const takenFirst = () => {
    const only = aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags(), launchTime: new Date(aws.now.getTime() - 7200_000) });
    aws.fault('PutParameter', (input) => {
      aws.parameters.set(input.Name as string, { value: 'other', tags: {}, at: aws.now });
      only.tags.set(KEYS.activatedAt, '2026-11-29T11:59:59.000Z');
      throw awsError('ParameterAlreadyExists');
    });
  };
  // coldGates is written not to throw; something no step expects does, here the log sink.
  const gateThrows = () => {
    aws.fault('GetParameter', ...Array.from({ length: 10 }, () => awsError('AccessDeniedException')));
    return (line: string) => {
      if (line.includes('reading the prime back-off failed')) throw new Error('log sink broke');
      lines.sink(line);
    };
  };
  // Launch tickets are taken only for a template that is unproven or failing: one failure, a while ago.
  const ticketsThrow = { take: async () => Promise.reject(new Error('ticket table broke')), release: async () => ({ released: true }), spend: async () => ({ spent: true }), spendHeld: async () => ({ spent: [], errors: [] }) };
  const failingOnce = () => {
    const streak = { ...freshStreak(templateOf(fleetConfig().pools[0]!)), failures: 1, lastFailureAt: new Date(aws.now.getTime() - 3600_000).toISOString() };
    aws.parameters.set(paths.primeState('linux'), { value: encodeStreak(streak), tags: {}, at: aws.now, type: 'String' });
  };

  it('coldGates throwing deletes the carried registration; the message is retried', async () => {
    takenFirst();
    const sink = gateThrows();
    const res = await handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => aws.now, { sink })(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(lines.logs('scale-up failed; every unsettled message will be retried')).toHaveLength(1);
    expect(ci.created).toBe(1);
    expect(ci.deleted).toEqual(['1']);
    expect(coldLaunched()).toHaveLength(0);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(0);
  });

  it('coldGates throwing with a carried registration that cannot be deleted counts it as rollback-incomplete', async () => {
    takenFirst();
    const sink = gateThrows();
    ci.failDelete = 3;
    const res = await handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => aws.now, { sink })(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(ci.deleted).toEqual([]);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(1);
    expect(lines.logs('deleting the registration a refused claim carried failed; the sweep removes it')[0]).toMatchObject({ traceId: 'trace-1', runnerId: '1' });
  });

  it('ticketCold throwing deletes the carried registration; the message is retried', async () => {
    takenFirst();
    failingOnce();
    let takes = 0;
    const launchTickets = { ...ticketsThrow, take: async () => (takes++, ticketsThrow.take()) };
    const res = await handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => aws.now, { launchTickets })(jobEvent(jobs(1)));
    expect(takes).toBe(1);
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(ci.deleted).toEqual(['1']);
    expect(coldLaunched()).toHaveLength(0);
  });

  it('ticketCold throwing with a carried registration that cannot be deleted counts it as rollback-incomplete', async () => {
    takenFirst();
    failingOnce();
    ci.failDelete = 3;
    const res = await handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => aws.now, { launchTickets: ticketsThrow })(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(ci.deleted).toEqual([]);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(1);
  });

  it("a redelivery whose look-up of the earlier receives' launches fails takes no launch ticket (the look-up comes before the gate)", async () => {
    failingOnce();
    // The message's own ticket: ticketCold would grant it, were it asked.
    const ticket = { key: 'ticket-1', owner: 'message:msg-1', expiresAt: new Date(aws.now.getTime() + 600_000).toISOString() };
    const released: unknown[] = [];
    let takes = 0;
    const launchTickets = {
      take: async () => ((takes += 1), { taken: [ticket], errors: [] }),
      release: async (t: unknown) => (released.push(t), { released: true }),
      spend: async () => ({ spent: true }),
      spendHeld: async () => ({ spent: [], errors: [] }),
    };
    // The observation answers; the token look-up fails.
    aws.fault('DescribeInstances', 'pass', awsError('UnauthorizedOperation'));
    const res = await handler({}, fleetConfig(), INSTANCE_ARN_PREFIX, () => aws.now, { launchTickets })(sqsEvent(record(JSON.stringify(job(1)), { id: 'msg-1', receiveCount: 2 })));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(aws.count('CreateFleet')).toBe(0);
    expect(lines.logs('cold launch failed; the message will be retried')[0]!.error).toMatch(/looking up the launches of the message's earlier receives failed/);
    expect(takes).toBe(0);
    expect(released).toEqual([]);
  });

  it('a cold launch EC2 refuses counts a carried registration it cannot delete as rollback-incomplete', async () => {
    takenFirst();
    ci.failDelete = 3;
    aws.fault('CreateFleet', awsError('InvalidParameterValue'));
    const res = await handler()(jobEvent(jobs(1)));
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: 'msg-1' }]);
    expect(ci.deleted).toEqual([]);
    expect(lines.metric('JobsFailed', { Reason: 'rollback-incomplete' })).toBe(1);
    expect(lines.metric('JobsFailed', { Reason: 'cold-launch' })).toBe(1);
  });
});

describe('scale-up: the prime back-off holds cold launches', () => {
  const config = fleetConfig({ warmSize: 0, primeFailureLimit: 3, primeBackoffCapSeconds: 3600 });
  const pool = config.pools[0]!;
  const storeStreak = (s: PrimeStreak) => aws.parameters.set(paths.primeState('linux'), { value: encodeStreak(s), tags: {}, at: aws.now, type: 'String' });
  const failedCold = () =>
    aws.addInstance({
      state: 'terminated',
      tags: {
        ...Object.fromEntries(coldLaunchTags(KEYS, 'linux', { jobId: 'github:99', traceId: 't' }, aws.now, 'tok').map((t) => [t.Key, t.Value])),
        [KEYS.startFailure]: 'RUN failed: the runner package: refused nothing installed',
      },
    });

  it('a failing pool launches one probe; the other jobs wait for the next probe, as wait copies, and none is lost', async () => {
    storeStreak({ ...freshStreak(templateOf(pool)), failures: 3, lastFailureAt: new Date(aws.now.getTime() - 3600_000).toISOString() });
    const res = await handler({}, config)(jobEvent(jobs(3)));
    expect(res.batchItemFailures).toEqual([]);
    expect(coldLaunched()).toHaveLength(1);
    expect(aws.sent.map((s) => s.queueUrl)).toEqual([QUEUE, QUEUE]);
    // One probe on its way: the others look again after their capacity backoff.
    for (const copy of aws.sent) expect(Date.parse(copy.attributes[WAIT_ATTRIBUTES.notBefore]!)).toBeGreaterThan(aws.now.getTime());
    expect(lines.logs('prime back-off: holding cold launches back')).toHaveLength(1);
    // One GetParameter for the streak, one filtered look at the gone instances.
    expect(aws.count('GetParameter')).toBe(1);
    expect(aws.count('DescribeInstances')).toBe(2);
  });

  it('jobs the back-off holds delete the registrations their refused warm claims carried; the probe launches with its own', async () => {
    storeStreak({ ...freshStreak(templateOf(pool)), failures: 3, lastFailureAt: new Date(aws.now.getTime() - 3600_000).toISOString() });
    // Parked before the pool's last failure (they prove nothing about the template), and
    // other invocations take each of them first.
    const old = new Date(aws.now.getTime() - 7200_000);
    for (let k = 0; k < 3; k++) aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: standbyTags(), launchTime: old });
    const taken = (input: Record<string, unknown>) => {
      aws.parameters.set(input.Name as string, { value: 'other', tags: {}, at: aws.now });
      aws.instances.get(paths.instanceIdOf(input.Name as string)!)!.tags.set(KEYS.activatedAt, '2026-11-29T11:59:59.000Z');
      throw awsError('ParameterAlreadyExists');
    };
    aws.fault('PutParameter', taken, taken, taken);
    expect((await handler({}, config)(jobEvent(jobs(3)))).batchItemFailures).toEqual([]);
    expect(coldLaunched()).toHaveLength(1);
    expect(aws.sent).toHaveLength(2);
    // Each job registered once; the two held jobs' registrations are deleted now, not by a sweep.
    expect(ci.created).toBe(3);
    expect(ci.deleted).toHaveLength(2);
    expect(ci.deleted).not.toContain(coldLaunched()[0]!.tags.get(KEYS.runnerId));
  });

  it('a cold failure the pool has not counted yet holds the batch until the next probe is due', async () => {
    storeStreak({ ...freshStreak(templateOf(pool)), proven: true });
    failedCold();
    await handler({}, config)(jobEvent(jobs(2)));
    expect(coldLaunched()).toHaveLength(0);
    // The first probe's delay from now, spread by up to 30 s (random() is 0.5 here).
    expect(aws.sent.map((s) => s.attributes[WAIT_ATTRIBUTES.notBefore])).toEqual([1, 2].map(() => new Date(aws.now.getTime() + 60_000 + 15_000).toISOString()));
  });

  it('a job held for an hour-away probe looks again within the capacity ceiling, gated afresh: a pool that recovered serves it', async () => {
    // The cap (3600 s) from the third failure in a row, observed now: the next probe is an hour away.
    storeStreak({ ...freshStreak(templateOf(pool)), proven: true, failures: 3, lastFailureAt: aws.now.toISOString() });
    await handler({ maxWaitSeconds: 7200 }, config)(jobEvent(jobs(1)));
    expect(coldLaunched()).toHaveLength(0);
    const [copy] = aws.sent;
    const notBefore = Date.parse(copy!.attributes[WAIT_ATTRIBUTES.notBefore]!);
    expect(notBefore).toBeGreaterThan(aws.now.getTime());
    expect(notBefore).toBeLessThanOrEqual(aws.now.getTime() + CAPACITY_BACKOFF_CAP_SECONDS * 1000);
    // Meanwhile a standby primed (the pool ended the streak): the returning copy launches.
    storeStreak({ ...freshStreak(templateOf(pool)), proven: true });
    aws.now = new Date(notBefore);
    aws.sent.length = 0;
    await handler({ maxWaitSeconds: 7200 }, config)(sqsEvent(record(copy!.body, { id: 'copy', attributes: copy!.attributes })));
    expect(coldLaunched()).toHaveLength(1);
    expect(aws.sent).toEqual([]);
  });

  it('an unreadable streak launches nothing cold: the jobs wait (failing safe)', async () => {
    aws.fault('GetParameter', ...Array.from({ length: 10 }, () => awsError('AccessDeniedException')));
    const res = await handler({}, config)(jobEvent(jobs(2)));
    expect(res.batchItemFailures).toEqual([]);
    expect(coldLaunched()).toHaveLength(0);
    expect(aws.sent).toHaveLength(2);
    expect(lines.logs('reading the prime back-off failed: no cold launch for the pool this batch')).toHaveLength(1);
  });

  it('a job held past its maximum wait goes to the dead-letter queue with the back-off as its reason', async () => {
    storeStreak({ ...freshStreak(templateOf(pool)), failures: 5, lastFailureAt: aws.now.toISOString() });
    const old = job(1, { receivedAt: new Date(aws.now.getTime() - 2 * 3600_000).toISOString() });
    await handler({ maxWaitSeconds: 3600 }, config)(jobEvent([old]));
    expect(coldLaunched()).toHaveLength(0);
    expect(aws.sent.map((s) => [s.queueUrl, s.attributes[WAIT_ATTRIBUTES.reason]])).toEqual([[DLQ, 'backoff-max-wait']]);
    expect(lines.metric('JobsDeadLettered', { Reason: 'backoff-max-wait' })).toBe(1);
  });

  it('a healthy pool launches every cold job', async () => {
    storeStreak({ ...freshStreak(templateOf(pool)), proven: true });
    await handler({}, config)(jobEvent(jobs(5)));
    expect(coldLaunched()).toHaveLength(5);
    expect(aws.sent).toHaveLength(0);
  });
});

describe('scale-up: reuse (contract reuse.ts)', () => {
  const reusable = () => fleetConfig({ reuse: { maxJobs: 5 } });
  const A = 'github:acme/app';
  const parkWith = (affinity: string, uses: string) =>
    aws.addInstance({ state: 'stopped', reason: 'Client.InstanceInitiatedShutdown', tags: { ...standbyTags(), [KEYS.affinity]: affinity, [KEYS.uses]: uses } }).id;
  const configOf = (id: string) => decodeRunnerConfig(aws.parameters.get(paths.runnerConfig(id))!.value);

  it('claims the instance of the job\'s affinity over a fresh one and another affinity\'s; the config carries affinity and uses; the runner is scoped; a hit is counted', async () => {
    const [fresh] = park(1);
    const foreign = parkWith('github:acme/other', '1');
    const mine = parkWith(A, '3');
    expect((await handler({}, reusable())(jobEvent([job(1)]))).batchItemFailures).toEqual([]);
    expect(warmStarted().map((i) => i.id)).toEqual([mine]);
    const runnerId = aws.instances.get(mine)!.tags.get(KEYS.runnerId)!;
    expect(configOf(mine)).toEqual({ provider: Provider.GITHUB, instanceId: mine, jitConfig: `jit-secret-${runnerId}`, reuse: { affinity: A, uses: 3 } });
    expect([...ci.scoped.keys()]).toEqual([runnerId]);
    expect(aws.instances.get(fresh!)!.state).toBe('stopped');
    expect(aws.instances.get(foreign)!.state).toBe('stopped');
    expect(lines.metric('ReuseHits', { Pool: 'linux' })).toBe(1);
    expect(lines.metric('ReuseMisses', { Pool: 'linux' })).toBe(0);
  });

  it('without a hit: a fresh instance (uses 0), then a cold launch (uses 0); another affinity\'s instance is never claimed; misses are counted', async () => {
    const [fresh] = park(1);
    const foreign = parkWith('github:acme/other', '2');
    expect((await handler({}, reusable())(jobEvent(jobs(2)))).batchItemFailures).toEqual([]);
    expect(warmStarted().map((i) => i.id)).toEqual([fresh]);
    expect(coldLaunched()).toHaveLength(1);
    for (const i of running()) expect(configOf(i.id)).toMatchObject({ reuse: { affinity: A, uses: 0 } });
    expect(ci.scoped.size).toBe(2);
    expect(aws.instances.get(foreign)!.state).toBe('stopped');
    expect(aws.parameters.has(paths.runnerConfig(foreign))).toBe(false);
    expect(lines.metric('ReuseHits', { Pool: 'linux' })).toBe(0);
    expect(lines.metric('ReuseMisses', { Pool: 'linux' })).toBe(2);
  });

  it('a pool without reuse: no reuse keys, no scoped runner, no reuse metrics, and no instance with an affinity is claimed', async () => {
    const leftover = parkWith(A, '1');
    const [fresh] = park(1);
    expect((await handler()(jobEvent(jobs(1)))).batchItemFailures).toEqual([]);
    expect(warmStarted().map((i) => i.id)).toEqual([fresh]);
    expect(configOf(fresh!)).not.toHaveProperty('reuse');
    expect(aws.instances.get(fresh!)!.tags.has(KEYS.affinity)).toBe(false);
    expect(ci.scoped.size).toBe(0);
    expect(aws.instances.get(leftover)!.state).toBe('stopped');
    expect(lines.metric('ReuseHits') + lines.metric('ReuseMisses')).toBe(0);
  });

  it('GitLab: a job with a project id gets a scoped runner and reuse keys; one without is served without reuse (no scoped runner, no reuse keys: its instance terminates after it)', async () => {
    const gitlab = new FakeCi(Provider.GITLAB, PREFIX);
    const config = buildFleetConfig({
      prefix: PREFIX,
      gitlab: { url: 'https://gitlab.example.com', runnerType: GitLabRunnerType.GROUP, scopeId: 12 },
      pools: [{ name: 'linux', provider: Provider.GITLAB, labels: ['linux'], launchTemplateId: 'lt-0123456789abcdef0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'], reuse: {} }],
    });
    park(2);
    const gl = (n: number, projectId?: number) => job(n, { provider: Provider.GITLAB, jobId: `gitlab:${n}`, ...(projectId === undefined ? {} : { projectId }) });
    const res = await handler({}, config, INSTANCE_ARN_PREFIX, () => aws.now, { providers: () => ({ gitlab }) })(jobEvent([gl(1, 42), gl(2)]));
    expect(res.batchItemFailures).toEqual([]);
    const byJob = new Map(warmStarted().map((i) => [i.tags.get(KEYS.jobId), i.id]));
    expect(configOf(byJob.get('gitlab:1')!)).toMatchObject({ provider: Provider.GITLAB, reuse: { affinity: 'gitlab:42', uses: 0 } });
    expect(configOf(byJob.get('gitlab:2')!)).not.toHaveProperty('reuse');
    expect([...gitlab.runners.values()].filter((r) => gitlab.scoped.has(r.runnerId)).map((r) => r.jobId)).toEqual(['gitlab:1']);
    expect(lines.logs(/has no affinity/)).toHaveLength(1);
  });

  // Only scale-up writes the affinity (the instance role cannot: R1): with the activation
  // tags, in their one CreateTags, and with a cold launch's tags.
  it('writes the job\'s affinity with the activation tags of a fresh instance and a hit, and with a cold launch\'s tags', async () => {
    const [fresh] = park(1);
    const mine = parkWith(A, '2');
    expect((await handler({}, reusable())(jobEvent(jobs(3)))).batchItemFailures).toEqual([]);
    expect(warmStarted().map((i) => i.id).sort()).toEqual([fresh!, mine].sort());
    expect(coldLaunched()).toHaveLength(1);
    for (const i of running()) expect(i.tags.get(KEYS.affinity)).toBe(A);
    const activations = aws.ec2.commandCalls(CreateTagsCommand).map((c) => c.args[0].input.Tags!).filter((t) => t.some((x) => x.Key === KEYS.activatedAt));
    expect(activations).toHaveLength(2);
    for (const tags of activations) expect(tags).toContainEqual({ Key: KEYS.affinity, Value: A });
  });

  it.each([
    ['a fresh instance keeps the affinity its activation wrote: it can serve that affinity alone', undefined],
    ['a hit keeps its affinity and use count', '3'],
  ])('a rolled-back activation never removes the affinity: %s', async (_, uses) => {
    const id = uses === undefined ? park(1)[0]! : parkWith(A, uses);
    aws.fault('StartInstances', awsError('InsufficientInstanceCapacity'));
    expect((await handler({}, reusable())(jobEvent([job(1)]))).batchItemFailures).toEqual([]);
    expect(lines.metric('Fallbacks', { Reason: 'start-failed' })).toBe(1);
    const inst = aws.instances.get(id)!;
    expect(inst.state).toBe('stopped');
    for (const k of [KEYS.activatedAt, KEYS.traceId, KEYS.jobId, KEYS.runnerId]) expect(inst.tags.has(k), k).toBe(false);
    expect(inst.tags.get(KEYS.affinity)).toBe(A);
    expect(inst.tags.get(KEYS.uses)).toBe(uses);
    expect(aws.parameters.has(paths.runnerConfig(id))).toBe(false);
    const deleted = aws.ec2.commandCalls(DeleteTagsCommand).flatMap((c) => c.args[0].input.Tags!.map((t) => t.Key));
    expect(deleted.length).toBeGreaterThan(0);
    expect(deleted).not.toContain(KEYS.affinity);
  });

  it('a claim verified late finds the instance parked meanwhile with another affinity: lost, rolled back, never started', async () => {
    const mine = parkWith(A, '3');
    // Every claim is verified (freshSnapshotMs -1): between the observation and the claim the
    // instance served another job and parked with another affinity.
    aws.fault('DescribeInstances', (input) => {
      const seen = aws['describe']((input.Filters ?? []) as never);
      const i = aws.instances.get(mine)!;
      i.tags.set(KEYS.affinity, 'github:acme/other');
      i.tags.set(KEYS.uses, '4');
      return seen;
    });
    const res = await handler({ warm: { claimsPerJob: 1, concurrency: 1, freshSnapshotMs: -1 } }, reusable())(jobEvent([job(1)]));
    expect(res.batchItemFailures).toEqual([]);
    expect(aws.instances.get(mine)!.state).toBe('stopped');
    expect(aws.parameters.has(paths.runnerConfig(mine))).toBe(false);
    expect(coldLaunched()).toHaveLength(1);
    expect(lines.metric('ReuseMisses', { Pool: 'linux' })).toBe(1);
  });
});
