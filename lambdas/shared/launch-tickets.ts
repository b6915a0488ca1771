import { randomUUID } from 'node:crypto';
import { DeleteItemCommand, GetItemCommand, UpdateItemCommand, type AttributeValue, type DynamoDBClient, type GetItemCommandOutput } from '@aws-sdk/client-dynamodb';
import type { TicketNeed } from '../pool/backoff';
import { errorName, isThrottling, READ, UnknownOutcomeError, WRITE_ONCE, type AwsCaller } from './aws-call';
import { realSleep, type Sleep } from './pacing';
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

/** The first pause between a release's sends; it doubles (about 1.4 s in all). */
const RELEASE_BACKOFF_MS = 200;

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
  /** The tickets won, at most the count asked for: launch this many. */
  readonly taken: readonly Ticket[];
  /** Errors that left a slot undecided (its launch does not happen: failing safe). */
  readonly errors: readonly string[];
}

export interface LaunchTickets {
  /**
   * Takes up to `count` of the need's slots for `pool`, in slot order. `owners` names the
   * takers (one each, in order; fresh tokens without it): a live ticket already held under
   * the same owner is taken again (its redelivered job, whose first launch never answered).
   */
  take(pool: string, need: TicketNeed, count: number, now: Date, owners?: readonly string[]): Promise<TakeOutcome>;
  /**
   * Gives a ticket back; only for a launch known not to have happened (refused, or settled as
   * not launched: lambdas/shared/launch-outcome.ts). Resent on a lost answer (`releaseStep`),
   * a few times. Never throws: what stays unreleased keeps the ticket until its expiry.
   */
  release(ticket: Ticket): Promise<{ readonly released: boolean; readonly error?: string }>;
}

/** Sends of a ticket's release at most (the first and its resends after lost answers or throttling). */
export const RELEASE_ATTEMPTS = 4;

/**
 * What a release's answer means. The delete is conditional on our owner token, so it is safe to
 * resend: after a lost answer, a refused condition means the first delete landed (or the
 * ticket had expired and another launcher took it): either way nothing of ours holds the slot.
 * On the first send the same refusal means the ticket was not ours any more (`not-ours`).
 */
export function releaseStep(error: unknown, afterLostAnswer: boolean): 'released' | 'not-ours' | 'resend' | 'failed' {
  if (errorName(error) === 'ConditionalCheckFailedException') return afterLostAnswer ? 'released' : 'not-ours';
  return error instanceof UnknownOutcomeError || isThrottling(error) ? 'resend' : 'failed';
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
    private readonly sleep: Sleep = realSleep,
  ) {}

  async take(pool: string, need: TicketNeed, count: number, now: Date, owners?: readonly string[]): Promise<TakeOutcome> {
    const taken: Ticket[] = [];
    const errors: string[] = [];
    for (const slot of need.slots) {
      if (taken.length >= count) break;
      const ticket = { key: ticketKey(pool, need.template, slot), owner: owners?.[taken.length] ?? this.token(), expiresAt: ticketExpiry(now, need.holdSeconds) };
      const o = await this.takeOne(ticket, pool, now);
      if (o === 'won') taken.push(ticket);
      else if (o !== 'lost') errors.push(`${slot}: ${o.error}`);
    }
    return { taken, errors };
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
   * expired is never removed; resent after a lost answer (`releaseStep`), with backoff. One
   * that stays unanswered keeps the ticket: the slot frees at its expiry, which only holds a
   * launch back.
   */
  async release(ticket: Ticket): Promise<{ readonly released: boolean; readonly error?: string }> {
    let lost = false;
    let last = '';
    for (let attempt = 1; attempt <= RELEASE_ATTEMPTS; attempt++) {
      if (attempt > 1) await this.sleep(RELEASE_BACKOFF_MS * 2 ** (attempt - 2));
      try {
        await this.aws.send(this.dynamodb, this.deleteOwn(ticket), WRITE_ONCE);
        return { released: true };
      } catch (error) {
        const step = releaseStep(error, lost);
        if (step === 'released') return { released: true };
        if (step !== 'resend') return { released: false, error: errorName(error) };
        lost ||= error instanceof UnknownOutcomeError;
        last = errorName(error);
      }
    }
    return { released: false, error: `unanswered ${RELEASE_ATTEMPTS} times: ${last}` };
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
