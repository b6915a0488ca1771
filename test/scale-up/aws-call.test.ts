import { describe, expect, it } from 'vitest';
import { AwsCaller, mapLimit, isThrottling, isUnknownOutcome, UnknownOutcomeError, WRITE_IDEMPOTENT, WRITE_ONCE } from '../../lambdas/shared/aws-call';
import { Pacer, TokenBucket } from '../../lambdas/shared/pacing';
import { awsError } from '../support/fake-aws';

class Cmd {
  constructor(readonly input: object = {}) {}
}
class StartInstancesCommand extends Cmd {}

function client(answers: (() => Promise<unknown>)[]) {
  const calls: number[] = [];
  return {
    calls,
    send: () => {
      calls.push(1);
      const next = answers.shift();
      return next ? next() : Promise.resolve('ok');
    },
  };
}

describe('AwsCaller', () => {
  const sleeps: number[] = [];
  const caller = new AwsCaller({ sleep: async (ms) => void sleeps.push(ms), random: () => 1, timeoutMs: 50 });

  it('retries throttling with growing backoff, for any call', async () => {
    sleeps.length = 0;
    const c = client([() => Promise.reject(awsError('RequestLimitExceeded', 503)), () => Promise.reject(awsError('ThrottlingException'))]);
    expect(await caller.send(c, new StartInstancesCommand(), WRITE_ONCE)).toBe('ok');
    expect(c.calls).toHaveLength(3);
    expect(sleeps).toEqual([100, 200]);
  });

  it('gives up after the policy attempts', async () => {
    const c = client(Array.from({ length: 9 }, () => () => Promise.reject(awsError('Throttling'))));
    await expect(caller.send(c, new StartInstancesCommand(), WRITE_ONCE)).rejects.toMatchObject({ name: 'Throttling' });
    expect(c.calls).toHaveLength(WRITE_ONCE.attempts);
  });

  it('does not repeat a non-idempotent call whose outcome is unknown', async () => {
    const c = client([() => new Promise(() => {})]);
    const error = await caller.send(c, new StartInstancesCommand(), WRITE_ONCE).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnknownOutcomeError);
    expect((error as Error).message).toMatch(/^StartInstances: outcome unknown/);
    expect(c.calls).toHaveLength(1);
  });

  it('names the timeout when the client gives up on its aborted signal at once (as the SDK does)', async () => {
    const c = {
      send: (_: unknown, o: { abortSignal: AbortSignal }) =>
        new Promise((_r, reject) => o.abortSignal.addEventListener('abort', () => reject(Object.assign(new Error('Request aborted'), { name: 'AbortError' })))),
    };
    const error = await caller.send(c, new StartInstancesCommand(), WRITE_ONCE).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(UnknownOutcomeError);
    expect((error as Error).message).toMatch(/^StartInstances: outcome unknown \(.*50 ms/);
    expect((error as Error).message).not.toMatch(/AbortError/);
  });

  it('repeats an idempotent call after a timeout or a 5xx', async () => {
    const c = client([() => new Promise(() => {}), () => Promise.reject(awsError('InternalError', 500))]);
    expect(await caller.send(c, new StartInstancesCommand(), WRITE_IDEMPOTENT)).toBe('ok');
    expect(c.calls).toHaveLength(3);
  });

  it('does not retry a client error', async () => {
    const c = client([() => Promise.reject(awsError('InvalidParameterValue'))]);
    await expect(caller.send(c, new StartInstancesCommand(), WRITE_IDEMPOTENT)).rejects.toMatchObject({ name: 'InvalidParameterValue' });
    expect(c.calls).toHaveLength(1);
  });

  it.each([
    ['RequestLimitExceeded', 503, true, false],
    ['TooManyUpdates', 400, true, false],
    ['ParameterAlreadyExists', 400, false, false],
    ['InternalServerError', 500, false, true],
    // EC2 lists it as a server error (5xx), but nothing was started: a definite refusal.
    ['InsufficientInstanceCapacity', 500, false, false],
    ['TimeoutError', undefined, false, true],
  ] as [string, number | undefined, boolean, boolean][])('classifies %s', (name, status, throttled, unknown) => {
    const e = Object.assign(new Error(name), { name, ...(status ? { $metadata: { httpStatusCode: status } } : {}) });
    expect(isThrottling(e)).toBe(throttled);
    expect(isUnknownOutcome(e)).toBe(unknown);
  });
});

describe('pacing', () => {
  it('lets a burst of the bucket size through, then one request per refill interval', () => {
    let now = 0;
    const bucket = new TokenBucket({ capacity: 3, refillPerSecond: 3 }, () => now);
    expect([bucket.reserve(), bucket.reserve(), bucket.reserve()]).toEqual([0, 0, 0]);
    expect(bucket.reserve()).toBe(334);
    expect(bucket.reserve()).toBe(667);
    now = 2_000;
    expect(bucket.reserve()).toBe(0);
  });

  it('makes callers of a paced action wait, and leaves unpaced actions alone', async () => {
    const waits: number[] = [];
    const pacer = new Pacer({ PutParameter: { capacity: 1, refillPerSecond: 2 } }, () => 0, async (ms) => void waits.push(ms));
    await pacer.take('PutParameter');
    await pacer.take('PutParameter');
    await pacer.take('DescribeInstances');
    expect(waits).toEqual([500]);
  });
});

describe('mapLimit', () => {
  it('settles every lane before it throws the first error: no worker is left running', async () => {
    const done: number[] = [];
    let release!: () => void;
    const slow = new Promise<void>((resolve) => (release = resolve));
    const run = mapLimit([0, 1, 2], 3, async (n) => {
      if (n === 0) throw new Error('lane 0 failed');
      if (n === 1) await slow;
      done.push(n);
      return n;
    });
    let settled = false;
    void run.catch(() => undefined).finally(() => (settled = true));
    // Let the failing lane and the quick one finish: the call must still wait for lane 1.
    for (let i = 0; i < 5; i++) await Promise.resolve();
    expect(settled).toBe(false);
    release();
    await expect(run).rejects.toThrow('lane 0 failed');
    expect(done.sort()).toEqual([1, 2]);
  });
});
