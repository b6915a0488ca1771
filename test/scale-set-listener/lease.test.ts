import { GetItemCommand, PutItemCommand, UpdateItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { beforeEach, describe, expect, it } from 'vitest';
import { DynamoScaleSetLeases } from '../../lambdas/scale-set-listener/lease';
import { pollScaleSet, type PollDeps, type PollOutcome } from '../../lambdas/scale-set-listener/poll';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import { JOB_RECORD_ATTRIBUTES, SCALE_SET_LEASE_ATTRIBUTES as A, scaleSetLeaseKey, type PoolConfig, type ScaleSetDemand, type PoolScaleSetConfig } from '../../lambdas/shared/contract';
import { createLogger } from '../../lambdas/shared/log';
import { FakeScaleSet } from '../support/fake-scale-set';
import { fleetConfig } from '../support/fixtures';
import { losingFirstAnswer } from '../support/lose-answer';
import { createJobRecordTable, motoDynamo } from '../support/moto-fleet';
import { motoForFile } from '../support/moto-per-file';
import { scaled } from '../support/slowdown';

/**
 * The scale-set lease against moto's DynamoDB (conditional writes as DynamoDB evaluates them),
 * with an in-memory scale set service that records two sessions polled at once.
 */

const TABLE = 'job-records';
const { moto } = motoForFile(async (m) => {
  await createJobRecordTable(m.dynamo, TABLE);
});
const dynamo = (): DynamoDBClient => motoDynamo(moto.endpoint);
const aws = () => new AwsCaller({ sleep: async () => {}, timeoutMs: scaled(8_000) });
const POOL: PoolConfig & { scaleSet: PoolScaleSetConfig } = { ...fleetConfig().pools[0]!, scaleSet: { name: 'linux-set', runnerGroup: 'Default' } };
const KEY = { [JOB_RECORD_ATTRIBUTES.key]: { S: scaleSetLeaseKey(POOL.name) } };

let api: FakeScaleSet;
let demands: ScaleSetDemand[];
beforeEach(() => {
  api = new FakeScaleSet();
  demands = [];
});

function deps(holder: string, windowMs: number, leases = new DynamoScaleSetLeases(aws(), dynamo(), TABLE), marginMs = 500): PollDeps {
  return {
    api,
    leases,
    holder,
    deadline: new Date(Date.now() + windowMs),
    marginMs,
    // Real time in milliseconds: the demand's bound scaled down with the margin (handler.ts).
    demandBoundMs: marginMs / 2,
    now: () => new Date(),
    log: createLogger({ holder }, () => {}),
    jobEvents: async () => {},
    requestCapacity: async (d) => {
      demands.push(d);
      return { observed: 0, started: 0, unserved: 0 };
    },
    traceId: () => `trace-${demands.length}`,
    sleep: async () => {},
  };
}

/** A lease of `ms` from now, released at its end. */
function times(ms: number): { expiresAt: Date; releaseAt: Date } {
  return { expiresAt: new Date(Date.now() + ms), releaseAt: new Date(Date.now() + ms) };
}

async function leaseItem(): Promise<Record<string, string | undefined>> {
  const item = (await dynamo().send(new GetItemCommand({ TableName: TABLE, Key: KEY, ConsistentRead: true }))).Item ?? {};
  return Object.fromEntries(Object.entries(item).map(([k, v]) => [k, v.S ?? v.N]));
}

describe('the scale-set lease, against moto', () => {
  it('8 pollers at once, several rounds: one holder and one session at any moment, the session kept across rounds', async () => {
    const setId = api.sets.get('linux-set')!;
    const rounds: PollOutcome['kind'][][] = [];
    for (let round = 0; round < 4; round++) {
      api.push(setId, round + 1);
      const outcomes = await Promise.all(Array.from({ length: 8 }, (_, n) => pollScaleSet(deps(`r${round}-p${n}`, scaled(2_500)), POOL)));
      rounds.push(outcomes.map((o) => o.kind));
    }
    expect(api.violations).toEqual([]);
    for (const kinds of rounds) {
      expect(kinds.filter((k) => k === 'polled')).toHaveLength(1);
      expect(kinds.filter((k) => k === 'held')).toHaveLength(7);
    }
    // One session for the four rounds: each holder went on with the one the last left open.
    expect(api.calls.filter((c) => c === 'createSession')).toHaveLength(1);
    // Three resumes of it, and one refresh per round for a fresh reading with its message.
    expect(api.calls.filter((c) => c === 'refreshSession')).toHaveLength(3 + 4);
    expect(api.acknowledged.size).toBe(4);
    const item = await leaseItem();
    expect(item[A.holder]).toBeUndefined();
    expect(Number(item[A.lastMessageId])).toBe(Math.max(...api.acknowledged));
  });

  it('an expired lease is taken over, with the session and the last message its holder left', async () => {
    const setId = api.sets.get('linux-set')!;
    const crashed = await api.createSession(setId, 'crashed');
    const first = api.push(setId, 1);
    api.acknowledged.add(first);
    const second = api.push(setId, 2);
    const past = Math.floor(Date.now() / 1000) - 5;
    await dynamo().send(
      new PutItemCommand({
        TableName: TABLE,
        Item: { ...KEY, [A.holder]: { S: 'crashed' }, [A.expiresAt]: { N: String(past) }, [A.sessionId]: { S: crashed.sessionId }, [A.scaleSetId]: { N: String(setId) }, [A.lastMessageId]: { N: String(first) } },
      }),
    );
    api.calls.length = 0;
    const o = await pollScaleSet(deps('next', scaled(2_000)), POOL);
    expect(o.kind).toBe('polled');
    expect(api.calls).not.toContain('createSession');
    expect(api.acknowledged.has(second)).toBe(true);
    const item = await leaseItem();
    expect(item[A.sessionId]).toBe(crashed.sessionId);
    expect(Number(item[A.lastMessageId])).toBe(second);
  });

  it('a live lease of another holder is not taken', async () => {
    const future = Math.floor(Date.now() / 1000) + 600;
    await dynamo().send(new PutItemCommand({ TableName: TABLE, Item: { ...KEY, [A.holder]: { S: 'other' }, [A.expiresAt]: { N: String(future) } } }));
    const o = await pollScaleSet(deps('me', scaled(2_000)), POOL);
    expect(o.kind).toBe('held');
    expect(api.calls).toEqual([]);
    expect((await leaseItem())[A.holder]).toBe('other');
  });

  it.each([
    ['landed', true],
    ['never ran', false],
  ])('a lost answer of the acquiring write (%s) is resolved by reading the item back', async (_, lands) => {
    const lossy = losingFirstAnswer(dynamo(), 'UpdateItemCommand', { lands });
    const leases = new DynamoScaleSetLeases(aws(), lossy, TABLE);
    const o = await leases.acquire(POOL.name, 'me', times(60_000), new Date());
    expect(o.kind).toBe('acquired');
    expect(lossy.calls()).toBe(lands ? 1 : 2);
    expect((await leaseItem())[A.holder]).toBe('me');
  });

  it('a lost answer of the acquiring write that another holder won meanwhile is held, not acquired', async () => {
    const future = Math.floor(Date.now() / 1000) + 600;
    const lossy = losingFirstAnswer(dynamo(), 'UpdateItemCommand', {
      // Another poller takes it first: our write is refused, and we hear a reset.
      before: () => dynamo().send(new PutItemCommand({ TableName: TABLE, Item: { ...KEY, [A.holder]: { S: 'other' }, [A.expiresAt]: { N: String(future) } } })).then(() => undefined),
    });
    const o = await new DynamoScaleSetLeases(aws(), lossy, TABLE).acquire(POOL.name, 'me', times(60_000), new Date());
    expect(o).toMatchObject({ kind: 'held', holder: 'other' });
  });

  it('a lost answer of the release is resolved by reading back: released, the session kept', async () => {
    const leases = new DynamoScaleSetLeases(aws(), dynamo(), TABLE);
    const taken = await leases.acquire(POOL.name, 'me', times(60_000), new Date());
    if (taken.kind !== 'acquired') throw new Error(taken.kind);
    const lossy = new DynamoScaleSetLeases(aws(), losingFirstAnswer(dynamo(), 'UpdateItemCommand'), TABLE);
    expect(await lossy.release(taken.lease, { sessionId: 's-1', scaleSetId: 1, lastMessageId: 7 })).toBe('done');
    const item = await leaseItem();
    expect(item[A.holder]).toBeUndefined();
    expect(item[A.sessionId]).toBe('s-1');
    expect(item[A.lastMessageId]).toBe('7');
  });

  it('a gone session is removed from the item; the runners started are kept for the next holder; a release may hold the lease until a time', async () => {
    const leases = new DynamoScaleSetLeases(aws(), dynamo(), TABLE);
    const taken = await leases.acquire(POOL.name, 'me', times(60_000), new Date());
    if (taken.kind !== 'acquired') throw new Error(taken.kind);
    const started = [{ instanceId: 'i-a', startedAt: '2026-12-06T00:00:00.000Z' }];
    expect(await leases.record(taken.lease, { sessionId: 's-1', scaleSetId: 1, lastMessageId: 3, recentlyStarted: started })).toBe('done');
    expect(await leases.record(taken.lease, {}, ['sessionId'])).toBe('done');
    let item = await leaseItem();
    expect(item[A.sessionId]).toBeUndefined();
    expect(item[A.lastMessageId]).toBe('3');
    // Held until a time: the holder stays, expiry and planned release both at it.
    const until = new Date(Date.now() + 45_000);
    expect(await leases.release(taken.lease, { lastMessageId: 3 }, until)).toBe('done');
    item = await leaseItem();
    expect(item[A.holder]).toBe('me');
    expect(Number(item[A.expiresAt])).toBe(Math.floor(until.getTime() / 1000));
    expect(Number(item[A.releaseAt])).toBe(Math.floor(until.getTime() / 1000));
    const early = await leases.acquire(POOL.name, 'next', times(60_000), new Date());
    expect(early).toMatchObject({ kind: 'held', holder: 'me', releaseAt: Math.floor(until.getTime() / 1000) });
    // Once it has passed, the next holder takes it with the runners started.
    const later = await leases.acquire(POOL.name, 'next', times(60_000), new Date(until.getTime() + 2_000));
    expect(later).toMatchObject({ kind: 'acquired', state: { scaleSetId: 1, lastMessageId: 3, recentlyStarted: started } });
  });

  it('a lease taken over mid-poll stops the poller: no poll after it, nothing of the new holder overwritten', async () => {
    const setId = api.sets.get('linux-set')!;
    api.push(setId, 1);
    const d = deps('old', scaled(3_000));
    let takenOver = false;
    const real = d.leases;
    const leases = {
      acquire: real.acquire.bind(real),
      record: real.record.bind(real),
      release: real.release.bind(real),
      renew: async (...args: Parameters<typeof real.renew>) => {
        // The first renewal after a poll finds another holder: the lease was taken over (an expiry misjudged, an operator).
        if (!takenOver && api.calls.includes('getMessage') && (takenOver = true)) await dynamo().send(new UpdateItemCommand({ TableName: TABLE, Key: KEY, UpdateExpression: 'SET #h = :h', ExpressionAttributeNames: { '#h': A.holder }, ExpressionAttributeValues: { ':h': { S: 'new' } } }));
        return real.renew(...args);
      },
    };
    const o = await pollScaleSet({ ...d, leases }, POOL);
    expect(o.kind).toBe('lease-lost');
    expect(api.calls.filter((c) => c === 'getMessage')).toHaveLength(1);
    expect((await leaseItem())[A.holder]).toBe('new');
  });
});
