import { GetItemCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient, type GetItemCommandOutput, type UpdateItemCommandOutput } from '@aws-sdk/client-dynamodb';
import { errorName, READ, UnknownOutcomeError, WRITE_ONCE, type AwsCaller } from '../shared/aws-call';
import { JOB_RECORD_ATTRIBUTES, SCALE_SET_LEASE_ATTRIBUTES as A, scaleSetLeaseKey, type ScaleSetStartedRunner } from '../shared/contract';

/**
 * The listener's lease per scale set: one item in the fleet's job-record table
 * (`scaleSetLeaseKey(pool)`), taken and kept by conditional writes, so at most one invocation
 * polls a scale set's session at any moment (GitHub allows one session per scale set; a
 * second poller would only meet conflicts). The lease's expiry is short and renewed before
 * each poll (poll.ts `LEASE_TERM_MS`), so a crashed holder's lease frees by itself soon after;
 * its planned release (`releaseAt`) tells the next invocation when to wait for the hand-over.
 *
 * The item also keeps what the next holder needs to go on where this one stopped: the session
 * id left open, the last message id acknowledged (never the queue token: a refresh mints one)
 * and the runners recent demands started (scale-up counts them while EC2's reads lag).
 * The lease's expiry is not the table's TTL attribute, so the item (and the session id) outlives it.
 *
 * A write whose answer was lost (a timeout, a reset, a 5xx after the fact) may have landed: it
 * is resolved by reading the item back (consistent read), never taken as won or lost.
 */

/** What a holder keeps in the lease item for the next one. */
export interface LeaseState {
  readonly sessionId?: string;
  readonly scaleSetId?: number;
  readonly lastMessageId?: number;
  readonly recentlyStarted?: readonly ScaleSetStartedRunner[];
}

/** A field of the state a write may remove (a session found gone). */
export type LeaseField = 'sessionId';

/** A lease this invocation holds. */
export interface Lease {
  readonly pool: string;
  readonly holder: string;
  /** Epoch seconds. */
  readonly expiresAt: number;
}

/** When a lease taken runs out, and when its holder plans to give it up (the hand-over). */
export interface LeaseTimes {
  readonly expiresAt: Date;
  readonly releaseAt: Date;
}

export type AcquireOutcome =
  | { readonly kind: 'acquired'; readonly lease: Lease; readonly state: LeaseState }
  /** Another live holder has it. */
  | { readonly kind: 'held'; readonly holder?: string; readonly expiresAt?: number; readonly releaseAt?: number }
  /** Undecided (the table did not answer): poll nothing this time (failing safe). */
  | { readonly kind: 'failed'; readonly error: string };

/** A write on a lease we hold: done, lost (another holder, or none), or undecided. */
export type HeldOutcome = 'done' | 'lost' | { readonly error: string };

export interface ScaleSetLeases {
  acquire(pool: string, holder: string, times: LeaseTimes, now: Date): Promise<AcquireOutcome>;
  /** Confirms the lease is still ours (and moves its expiry on): before each poll. */
  renew(lease: Lease, expiresAt: Date): Promise<HeldOutcome>;
  /** Records the session, the last message acknowledged and the runners started, while the lease is ours; `remove` drops fields. */
  record(lease: Lease, state: LeaseState, remove?: readonly LeaseField[]): Promise<HeldOutcome>;
  /**
   * Gives the lease up, keeping `state` for the next holder. With `holdUntil` the lease stays
   * ours until then (expiry and planned release both set to it): a scale-up invocation whose
   * outcome is unknown may still run, and no next holder's demand may start beside it.
   */
  release(lease: Lease, state: LeaseState, holdUntil?: Date): Promise<HeldOutcome>;
}

const seconds = (d: Date) => Math.floor(d.getTime() / 1000);

export class DynamoScaleSetLeases implements ScaleSetLeases {
  constructor(
    private readonly aws: AwsCaller,
    private readonly dynamodb: DynamoDBClient,
    private readonly tableName: string,
  ) {}

  /**
   * Taken when there is no item, no holder (released) or the holder's expiry passed; a lease
   * under our own holder id is ours again (a resend of our own lost write). A lost answer is
   * read back: our holder id in the item means it landed.
   */
  async acquire(pool: string, holder: string, times: LeaseTimes, now: Date): Promise<AcquireOutcome> {
    const lease: Lease = { pool, holder, expiresAt: seconds(times.expiresAt) };
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        const out = await this.aws.send<UpdateItemCommandOutput>(this.dynamodb, this.take(lease, seconds(times.releaseAt), now), WRITE_ONCE);
        return { kind: 'acquired', lease, state: stateOf(out.Attributes) };
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return this.heldBy(pool);
        if (!(error instanceof UnknownOutcomeError)) return { kind: 'failed', error: errorName(error) };
      }
      let item: Record<string, AttributeValue> | undefined;
      try {
        item = await this.read(pool);
      } catch (error) {
        return { kind: 'failed', error: `lease write outcome unknown, read failed: ${errorName(error)}` };
      }
      if (item?.[A.holder]?.S === holder) return { kind: 'acquired', lease, state: stateOf(item) };
      if (liveHolder(item, now) !== undefined) return held(item);
      // Not landed, and still free: sent once more.
    }
    return { kind: 'failed', error: 'lease write outcome unknown twice' };
  }

  renew(lease: Lease, expiresAt: Date): Promise<HeldOutcome> {
    const e = seconds(expiresAt);
    return this.onHeld(lease, 'SET #expires = :expires', { '#expires': A.expiresAt }, { ':expires': { N: String(e) } }, (item) => Number(item[A.expiresAt]?.N) === e);
  }

  record(lease: Lease, state: LeaseState, remove: readonly LeaseField[] = []): Promise<HeldOutcome> {
    const { set, names, values } = stateUpdate(state);
    for (const f of remove) names[`#${f}`] = A[f];
    const update = [...(set.length > 0 ? [`SET ${set.join(', ')}`] : []), ...(remove.length > 0 ? [`REMOVE ${remove.map((f) => `#${f}`).join(', ')}`] : [])].join(' ');
    if (update === '') return Promise.resolve('done');
    return this.onHeld(lease, update, names, values, (item) => sameState(item, state) && remove.every((f) => item[A[f]] === undefined));
  }

  /**
   * The holder is removed and the expiry set in the past: the next invocation takes it at once.
   * With `holdUntil`, the holder stays and the lease runs until then.
   */
  release(lease: Lease, state: LeaseState, holdUntil?: Date): Promise<HeldOutcome> {
    const { set, names, values } = stateUpdate(state);
    if (holdUntil !== undefined) {
      const until = seconds(holdUntil);
      return this.onHeld(
        lease,
        `SET ${[...set, '#expires = :until', '#release = :until'].join(', ')}`,
        { ...names, '#expires': A.expiresAt, '#release': A.releaseAt },
        { ...values, ':until': { N: String(until) } },
        (item) => Number(item[A.expiresAt]?.N) === until && sameState(item, state),
      );
    }
    return this.onHeld(
      lease,
      `SET ${[...set, '#expires = :zero'].join(', ')} REMOVE #holder`,
      { ...names, '#expires': A.expiresAt },
      { ...values, ':zero': { N: '0' } },
      (item) => item[A.holder] === undefined && sameState(item, state),
      // After a lost answer the holder is gone: the release landed (nobody else removes a holder).
      true,
    );
  }

  /**
   * A write conditioned on our holder id, sent at most twice. Refused on the first send: the
   * lease is not ours ('lost'). After a lost answer the item is read back: `landed` says the
   * write is in; another holder (or, for a release, none) decides 'lost'; still ours, it is
   * sent again.
   */
  private async onHeld(
    lease: Lease,
    update: string,
    names: Record<string, string>,
    values: Record<string, AttributeValue>,
    landed: (item: Record<string, AttributeValue>) => boolean,
    removesHolder = false,
  ): Promise<HeldOutcome> {
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        await this.aws.send(
          this.dynamodb,
          new UpdateItemCommand({
            TableName: this.tableName,
            Key: keyOf(lease.pool),
            UpdateExpression: update,
            ConditionExpression: '#holder = :holder',
            ExpressionAttributeNames: { ...names, '#holder': A.holder },
            ExpressionAttributeValues: { ...values, ':holder': { S: lease.holder } },
          }),
          WRITE_ONCE,
        );
        return 'done';
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return 'lost';
        if (!(error instanceof UnknownOutcomeError)) return { error: errorName(error) };
      }
      let item: Record<string, AttributeValue> | undefined;
      try {
        item = await this.read(lease.pool);
      } catch (error) {
        return { error: `lease write outcome unknown, read failed: ${errorName(error)}` };
      }
      if (item !== undefined && landed(item)) return 'done';
      if (item?.[A.holder]?.S !== lease.holder) return removesHolder && item !== undefined && item[A.holder] === undefined ? 'done' : 'lost';
    }
    return { error: 'lease write outcome unknown twice' };
  }

  private take(lease: Lease, releaseAt: number, now: Date): UpdateItemCommand {
    return new UpdateItemCommand({
      TableName: this.tableName,
      Key: keyOf(lease.pool),
      UpdateExpression: 'SET #holder = :holder, #expires = :expires, #release = :release',
      ConditionExpression: 'attribute_not_exists(#key) OR attribute_not_exists(#holder) OR #expires < :now OR #holder = :holder',
      ExpressionAttributeNames: { '#key': JOB_RECORD_ATTRIBUTES.key, '#holder': A.holder, '#expires': A.expiresAt, '#release': A.releaseAt },
      ExpressionAttributeValues: { ':holder': { S: lease.holder }, ':expires': { N: String(lease.expiresAt) }, ':release': { N: String(releaseAt) }, ':now': { N: String(seconds(now)) } },
      ReturnValues: 'ALL_NEW',
    });
  }

  private async heldBy(pool: string): Promise<AcquireOutcome> {
    try {
      return held(await this.read(pool));
    } catch {
      // Refused is enough to know: someone else holds it.
      return { kind: 'held' };
    }
  }

  private async read(pool: string): Promise<Record<string, AttributeValue> | undefined> {
    const out = await this.aws.send<GetItemCommandOutput>(this.dynamodb, new GetItemCommand({ TableName: this.tableName, Key: keyOf(pool), ConsistentRead: true }), READ);
    return out.Item;
  }
}

function keyOf(pool: string): Record<string, AttributeValue> {
  return { [JOB_RECORD_ATTRIBUTES.key]: { S: scaleSetLeaseKey(pool) } };
}

function liveHolder(item: Record<string, AttributeValue> | undefined, now: Date): string | undefined {
  const holder = item?.[A.holder]?.S;
  return holder !== undefined && Number(item![A.expiresAt]?.N ?? '0') >= seconds(now) ? holder : undefined;
}

function held(item: Record<string, AttributeValue> | undefined): AcquireOutcome {
  const holder = item?.[A.holder]?.S;
  const expiresAt = item?.[A.expiresAt]?.N;
  const releaseAt = item?.[A.releaseAt]?.N;
  return {
    kind: 'held',
    ...(holder === undefined ? {} : { holder }),
    ...(expiresAt === undefined ? {} : { expiresAt: Number(expiresAt) }),
    ...(releaseAt === undefined ? {} : { releaseAt: Number(releaseAt) }),
  };
}

export function stateOf(item: Record<string, AttributeValue> | undefined): LeaseState {
  const sessionId = item?.[A.sessionId]?.S;
  const scaleSetId = item?.[A.scaleSetId]?.N;
  const lastMessageId = item?.[A.lastMessageId]?.N;
  const recentlyStarted = startedRunnersOf(item?.[A.recentlyStarted]?.S);
  return {
    ...(sessionId === undefined ? {} : { sessionId }),
    ...(scaleSetId === undefined ? {} : { scaleSetId: Number(scaleSetId) }),
    ...(lastMessageId === undefined ? {} : { lastMessageId: Number(lastMessageId) }),
    ...(recentlyStarted === undefined ? {} : { recentlyStarted }),
  };
}

/** The lease's JSON of started runners; anything else (an older item, a hand edit) is none. */
function startedRunnersOf(text: string | undefined): ScaleSetStartedRunner[] | undefined {
  if (text === undefined) return undefined;
  try {
    const doc: unknown = JSON.parse(text);
    if (!Array.isArray(doc)) return undefined;
    return doc.filter((r): r is ScaleSetStartedRunner => typeof r?.instanceId === 'string' && typeof r?.startedAt === 'string').map((r) => ({ instanceId: r.instanceId, startedAt: r.startedAt }));
  } catch {
    return undefined;
  }
}

function sameState(item: Record<string, AttributeValue>, state: LeaseState): boolean {
  const seen = stateOf(item);
  return (
    (['sessionId', 'scaleSetId', 'lastMessageId'] as const).every((f) => state[f] === undefined || seen[f] === state[f]) &&
    (state.recentlyStarted === undefined || JSON.stringify(seen.recentlyStarted ?? []) === JSON.stringify(state.recentlyStarted))
  );
}

/** The SET clauses for the state's fields (each present one; an absent one is left as it is). */
function stateUpdate(state: LeaseState): { set: string[]; names: Record<string, string>; values: Record<string, AttributeValue> } {
  const set: string[] = [];
  const names: Record<string, string> = {};
  const values: Record<string, AttributeValue> = {};
  const put = (field: 'sessionId' | 'scaleSetId' | 'lastMessageId' | 'recentlyStarted', value: AttributeValue | undefined) => {
    if (value === undefined) return;
    set.push(`#${field} = :${field}`);
    names[`#${field}`] = A[field];
    values[`:${field}`] = value;
  };
  put('sessionId', state.sessionId === undefined ? undefined : { S: state.sessionId });
  put('scaleSetId', state.scaleSetId === undefined ? undefined : { N: String(state.scaleSetId) });
  put('lastMessageId', state.lastMessageId === undefined ? undefined : { N: String(state.lastMessageId) });
  put('recentlyStarted', state.recentlyStarted === undefined ? undefined : { S: JSON.stringify(state.recentlyStarted) });
  return { set, names, values };
}
