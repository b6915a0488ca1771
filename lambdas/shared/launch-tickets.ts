import { randomUUID } from 'node:crypto';
import { DeleteItemCommand, GetItemCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient, type GetItemCommandOutput } from '@aws-sdk/client-dynamodb';
import type { TicketNeed } from '../pool/backoff';
import { errorName, READ, UnknownOutcomeError, WRITE_ONCE, type AwsCaller } from './aws-call';
import { JOB_RECORD_ATTRIBUTES, LAUNCH_TICKET_ATTRIBUTES, LAUNCH_TICKET_KEY_PREFIX } from './contract';

/**
 * Launch tickets: the permission to launch for a pool whose template is unproven or failing,
 * taken in the same atomic step as the decision (lambdas/pool/backoff.ts `ticketNeed`). One
 * item per slot in the per-job record table (its key attribute, its TTL attribute), written
 * with a condition that only the first writer passes. The table's writes are DynamoDB's, not
 * SSM's: they do not spend the claims' PutParameter budget (about 3 TPS per account).
 *
 * A write whose answer was lost (a timeout, a reset, a 5xx after the fact) may have landed: it
 * is resolved by reading the item back (consistent read) and comparing its owner token with
 * ours, never taken as won or lost.
 */

/** A ticket this launcher holds: its item key, the owner token its write carried, when it expires. */
export interface Ticket {
  readonly key: string;
  readonly owner: string;
  /** When the slot frees by itself if the ticket is never released (ISO 8601). */
  readonly expiresAt: string;
}

/**
 * The log fields naming a ticket kept until its expiry (a launch that may have happened, a
 * release that failed, an exception after the take): which slot is spent, whose it is (the
 * owner token a conditional delete needs) and until when.
 */
export function keptTicketFields(pool: string, ticket: Ticket): { pool: string; ticketKey: string; ticketOwner: string; ticketExpiresAt: string } {
  return { pool, ticketKey: ticket.key, ticketOwner: ticket.owner, ticketExpiresAt: ticket.expiresAt };
}

export interface TakeOutcome {
  /** The tickets held, at most the count asked for: launch this many. Each names its owner. */
  readonly taken: readonly Ticket[];
  /** Errors that left a slot undecided (its launch does not happen: failing safe). */
  readonly errors: readonly string[];
}

export interface LaunchTickets {
  /**
   * Takes up to `count` of the need's slots for `pool`, in slot order. `owners` names the
   * takers (fresh tokens without it): a live ticket already held under one of them is that
   * owner's again, with a fresh expiry (its redelivered job, whose first launch never
   * answered), whichever slot it is in, and that owner takes no other; match the outcome to the
   * owners by `Ticket.owner`. Only `mayHold` (by default every owner; a first receive's message
   * cannot hold one) are looked for, and a slot that cannot be read stops only them.
   */
  take(pool: string, need: TicketNeed, count: number, now: Date, owners?: readonly string[], mayHold?: readonly string[]): Promise<TakeOutcome>;
  /**
   * Gives a ticket back; only for a launch known not to have happened (refused, or settled as
   * not launched: lambdas/shared/launch-outcome.ts). A lost answer is read back and the delete
   * sent again while the ticket is still ours. Never throws: what stays unreleased keeps the
   * ticket until its expiry.
   */
  release(ticket: Ticket): Promise<{ readonly released: boolean; readonly error?: string }>;
  /**
   * Keeps a ticket whose launch happened until its expiry, under a fresh owner token: the
   * message that owned it cannot launch on it again when it is redelivered (its instance was
   * terminated after a later step failed). Never throws: a ticket left
   * under its message's owner costs at most one launch per receive of that message.
   */
  spend(ticket: Ticket): Promise<{ readonly spent: boolean; readonly error?: string }>;
  /**
   * Spends the live ticket of the need's slots that `owner` holds (`spend`): for a launch
   * that happened under a ticket this caller did not take (a redelivery that took over its
   * earlier receive's instance, which then failed). Never throws.
   */
  spendHeld(pool: string, need: TicketNeed, owner: string, now: Date): Promise<{ readonly spent: readonly Ticket[]; readonly errors: readonly string[] }>;
}

/**
 * The tickets of a launch to give back: all when nothing launched, those beyond what launched
 * otherwise (each ticket is one instance); none while the outcome is unknown (it may have
 * launched them all: they free at their expiry).
 */
export function unspentTickets(taken: readonly Ticket[], launched: number, unknown: boolean): Ticket[] {
  return unknown ? [] : taken.slice(Math.min(taken.length, launched));
}

/**
 * The owner token of a cold launch's ticket: the SQS message's id, so the message's redelivery
 * holds the ticket its earlier receive took. A receive whose launch never answered (every send
 * lost, nothing found by its token) keeps its ticket; the redelivery either takes that launch's
 * instance over (no ticket needed) or, finding none, launches on the same ticket, instead of
 * waiting for the ticket's expiry.
 */
export function messageTicketOwner(messageId: string): string {
  return `message:${messageId}`;
}

/** The item key of a slot: prefixed so it can never be a job id (`github:…`, `gitlab:…`). */
export function ticketKey(pool: string, template: string, slot: string): string {
  return `${LAUNCH_TICKET_KEY_PREFIX}${pool}|${template}|${slot}`;
}

/**
 * What a consistent read says about a write of `owner` whose answer was lost: `won` (our token
 * is there), `lost` (another launcher's live ticket), or `absent` (nothing live: ours did not
 * land, or it expired, which is the same for the slot).
 */
export function readBack(item: Record<string, AttributeValue> | undefined, owner: string, now: Date): 'won' | 'lost' | 'absent' {
  if (!item) return 'absent';
  if (item[LAUNCH_TICKET_ATTRIBUTES.owner]?.S === owner) return 'won';
  const expires = Number(item[JOB_RECORD_ATTRIBUTES.expiresAt]?.N ?? '0');
  return expires < Math.floor(now.getTime() / 1000) ? 'absent' : 'lost';
}

/** When a ticket taken now frees by itself: whole seconds, as the table's TTL attribute holds it (ISO 8601). */
export function ticketExpiry(now: Date, holdSeconds: number): string {
  return new Date((Math.floor(now.getTime() / 1000) + holdSeconds) * 1000).toISOString();
}

export class DynamoLaunchTickets implements LaunchTickets {
  constructor(
    private readonly aws: AwsCaller,
    private readonly dynamodb: DynamoDBClient,
    private readonly tableName: string,
    private readonly token: () => string = randomUUID,
  ) {}

  async take(pool: string, need: TicketNeed, count: number, now: Date, owners?: readonly string[], mayHold: readonly string[] = owners ?? []): Promise<TakeOutcome> {
    const taken: Ticket[] = [];
    const errors: string[] = [];
    // Owners not yet served, in order. A redelivered job's live ticket is found first, whatever
    // its slot: a scan that met a free slot before it would hand the owner a second one.
    const waiting = owners ? [...owners] : undefined;
    const heldKeys = new Set<string>();
    const candidates = waiting ? mayHold.filter((o) => waiting.includes(o)) : [];
    if (candidates.length > 0) {
      const held = await this.heldTickets(pool, need, candidates, now);
      errors.push(...held.errors);
      for (const owner of candidates) {
        const ticket = held.tickets.get(owner);
        // An unread slot may be this owner's: it takes no new one this time (fail safe).
        if (!ticket && held.errors.length === 0) continue;
        waiting!.splice(waiting!.indexOf(owner), 1);
        if (!ticket || taken.length >= count) continue;
        // Taken again under the same owner: the condition passes and the expiry starts afresh.
        const again = { ...ticket, expiresAt: ticketExpiry(now, need.holdSeconds) };
        const o = await this.takeOne(again, pool, now);
        if (o === 'won') taken.push(again);
        else if (o !== 'lost') errors.push(`${ticket.key}: ${o.error}`);
      }
      for (const t of held.tickets.values()) heldKeys.add(t.key);
    }
    for (const slot of need.slots) {
      if (taken.length >= count || waiting?.length === 0) break;
      const key = ticketKey(pool, need.template, slot);
      if (heldKeys.has(key)) continue;
      const ticket = { key, owner: waiting?.[0] ?? this.token(), expiresAt: ticketExpiry(now, need.holdSeconds) };
      const o = await this.takeOne(ticket, pool, now);
      if (o === 'won') {
        taken.push(ticket);
        waiting?.shift();
      } else if (o !== 'lost') errors.push(`${slot}: ${o.error}`);
    }
    return { taken, errors };
  }

  async spendHeld(pool: string, need: TicketNeed, owner: string, now: Date): Promise<{ readonly spent: readonly Ticket[]; readonly errors: readonly string[] }> {
    const held = await this.heldTickets(pool, need, [owner], now);
    const spent: Ticket[] = [];
    const errors = [...held.errors];
    for (const ticket of held.tickets.values()) {
      const r = await this.spend(ticket);
      if (r.spent) spent.push(ticket);
      else errors.push(`${ticket.key}: ${r.error}`);
    }
    return { spent, errors };
  }

  /**
   * The live ticket of the need's slots each of `owners` holds (consistent reads, one per slot,
   * in parallel: `primeFailureLimit` at most, one for a probe). A slot whose read fails is an
   * error: it may be one of theirs.
   */
  private async heldTickets(pool: string, need: TicketNeed, owners: readonly string[], now: Date): Promise<{ tickets: Map<string, Ticket>; errors: string[] }> {
    const tickets = new Map<string, Ticket>();
    const errors: string[] = [];
    const reads = await Promise.all(
      need.slots.map(async (slot) => {
        const key = ticketKey(pool, need.template, slot);
        try {
          return { slot, key, item: (await this.read(key)).Item };
        } catch (error) {
          return { slot, key, error: errorName(error) };
        }
      }),
    );
    for (const r of reads) {
      if ('error' in r) {
        errors.push(`${r.slot}: read failed: ${r.error}`);
        continue;
      }
      const owner = r.item?.[LAUNCH_TICKET_ATTRIBUTES.owner]?.S;
      if (owner === undefined || !owners.includes(owner) || tickets.has(owner)) continue;
      const expires = Number(r.item![JOB_RECORD_ATTRIBUTES.expiresAt]?.N ?? '0');
      if (expires >= Math.floor(now.getTime() / 1000)) tickets.set(owner, { key: r.key, owner, expiresAt: new Date(expires * 1000).toISOString() });
    }
    return { tickets, errors };
  }

  /** One slot; a lost answer is read back, and a write that did not land is sent once more. */
  private async takeOne(ticket: Ticket, pool: string, now: Date): Promise<'won' | 'lost' | { error: string }> {
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        await this.aws.send(this.dynamodb, this.put(ticket, pool, now), WRITE_ONCE);
        return 'won';
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return 'lost';
        if (!(error instanceof UnknownOutcomeError)) return { error: errorName(error) };
      }
      let item: Record<string, AttributeValue> | undefined;
      try {
        item = (await this.read(ticket.key)).Item;
      } catch (error) {
        // Undecided: it may be ours, so nobody else takes the slot either; no launch (fail safe).
        return { error: `put outcome unknown, read failed: ${errorName(error)}` };
      }
      const seen = readBack(item, ticket.owner, now);
      if (seen !== 'absent') return seen;
    }
    return { error: 'put outcome unknown twice' };
  }

  /**
   * A conditional delete on our owner token, so a ticket another launcher took after ours
   * expired is never removed. A lost answer is read back, as `takeOne` does.
   */
  async release(ticket: Ticket): Promise<{ readonly released: boolean; readonly error?: string }> {
    const o = await this.settleOwnWrite(ticket, () => this.deleteOwn(ticket));
    return o === 'done' ? { released: true } : { released: false, error: o.error };
  }

  async spend(ticket: Ticket): Promise<{ readonly spent: boolean; readonly error?: string }> {
    const o = await this.settleOwnWrite(ticket, () => this.reown(ticket, this.token()));
    return o === 'done' ? { spent: true } : { spent: false, error: o.error };
  }

  /**
   * A write conditional on the ticket still being ours, sent at most twice. A refused condition
   * on the first send means the ticket is not ours (an error). After a lost answer the item is
   * read back: no longer ours, the write is done (it landed, or the ticket expired and went
   * elsewhere); still ours, it is sent again. An answer lost twice keeps the ticket as it is.
   */
  private async settleOwnWrite(ticket: Ticket, command: () => DeleteItemCommand | UpdateItemCommand): Promise<'done' | { error: string }> {
    for (let attempt = 1; attempt <= 2; attempt++) {
      try {
        await this.aws.send(this.dynamodb, command(), WRITE_ONCE);
        return 'done';
      } catch (error) {
        if (errorName(error) === 'ConditionalCheckFailedException') return attempt === 1 ? { error: errorName(error) } : 'done';
        if (!(error instanceof UnknownOutcomeError)) return { error: errorName(error) };
      }
      try {
        if ((await this.read(ticket.key)).Item?.[LAUNCH_TICKET_ATTRIBUTES.owner]?.S !== ticket.owner) return 'done';
      } catch (error) {
        return { error: `outcome unknown, read failed: ${errorName(error)}` };
      }
    }
    return { error: 'outcome unknown twice' };
  }

  /** Hands the ticket to `owner`, only while it is still ours. */
  private reown(ticket: Ticket, owner: string): UpdateItemCommand {
    return new UpdateItemCommand({
      TableName: this.tableName,
      Key: { [JOB_RECORD_ATTRIBUTES.key]: { S: ticket.key } },
      UpdateExpression: 'SET #owner = :new',
      ConditionExpression: '#owner = :owner',
      ExpressionAttributeNames: { '#owner': LAUNCH_TICKET_ATTRIBUTES.owner },
      ExpressionAttributeValues: { ':owner': { S: ticket.owner }, ':new': { S: owner } },
    });
  }

  private deleteOwn(ticket: Ticket): DeleteItemCommand {
    return new DeleteItemCommand({
      TableName: this.tableName,
      Key: { [JOB_RECORD_ATTRIBUTES.key]: { S: ticket.key } },
      ConditionExpression: '#owner = :owner',
      ExpressionAttributeNames: { '#owner': LAUNCH_TICKET_ATTRIBUTES.owner },
      ExpressionAttributeValues: { ':owner': { S: ticket.owner } },
    });
  }

  /**
   * An update rather than a put only so the grant stays the record's (UpdateItem, GetItem,
   * DeleteItem). The condition treats an expired ticket as absent: TTL deletes lazily. The
   * item's expiry is the ticket's, so what the table frees and what the logs say agree. A
   * ticket held under the same owner is taken again (a redelivered job's: its own launch).
   */
  private put(ticket: Ticket, pool: string, now: Date): UpdateItemCommand {
    const nowSeconds = Math.floor(now.getTime() / 1000);
    return new UpdateItemCommand({
      TableName: this.tableName,
      Key: { [JOB_RECORD_ATTRIBUTES.key]: { S: ticket.key } },
      UpdateExpression: 'SET #owner = :owner, #pool = :pool, #takenAt = :takenAt, #expires = :expires',
      ConditionExpression: 'attribute_not_exists(#key) OR #expires < :now OR #owner = :owner',
      ExpressionAttributeNames: {
        '#key': JOB_RECORD_ATTRIBUTES.key,
        '#owner': LAUNCH_TICKET_ATTRIBUTES.owner,
        '#pool': LAUNCH_TICKET_ATTRIBUTES.pool,
        '#takenAt': LAUNCH_TICKET_ATTRIBUTES.takenAt,
        '#expires': JOB_RECORD_ATTRIBUTES.expiresAt,
      },
      ExpressionAttributeValues: {
        ':owner': { S: ticket.owner },
        ':pool': { S: pool },
        ':takenAt': { S: now.toISOString() },
        ':expires': { N: String(Date.parse(ticket.expiresAt) / 1000) },
        ':now': { N: String(nowSeconds) },
      },
    });
  }

  private read(key: string): Promise<GetItemCommandOutput> {
    return this.aws.send<GetItemCommandOutput>(
      this.dynamodb,
      new GetItemCommand({ TableName: this.tableName, Key: { [JOB_RECORD_ATTRIBUTES.key]: { S: key } }, ConsistentRead: true }),
      READ,
    );
  }
}
