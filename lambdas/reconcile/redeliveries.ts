/**
 * Which of the GitHub App's webhook deliveries to send again, as a pure function over
 * `GET /app/hook/deliveries` (https://docs.github.com/en/rest/apps/webhooks): GitHub lists
 * only deliveries it attempted, for a few days, without payloads, newest first; a redelivery
 * is listed as a delivery of its own with the original's `guid` and `redelivery: true`.
 */
export interface ListedDelivery {
  readonly id: number;
  readonly guid: string;
  readonly deliveredAt: number;
  readonly statusCode: number;
  readonly event: string;
  readonly action: string | undefined;
}

export interface RedeliveryRules {
  /** Redeliveries asked for in one run at most. */
  readonly limit: number;
  /** A GUID that failed this many attempts (the first included) is given up on. */
  readonly maxAttempts: number;
  /** Deliveries older than this (epoch ms) are not sent again: their job is long gone or served. */
  readonly notBefore: number;
}

/** Parses one page of the list; entries that lack a field the choice needs are skipped. */
export function parseDeliveries(data: unknown): ListedDelivery[] {
  if (!Array.isArray(data)) throw new Error('the deliveries answer is not a list');
  const out: ListedDelivery[] = [];
  for (const d of data as Record<string, unknown>[]) {
    const at = typeof d?.delivered_at === 'string' ? Date.parse(d.delivered_at) : NaN;
    if (!Number.isSafeInteger(d?.id) || typeof d.guid !== 'string' || Number.isNaN(at) || !Number.isInteger(d.status_code) || typeof d.event !== 'string') continue;
    out.push({ id: d.id as number, guid: d.guid, deliveredAt: at, statusCode: d.status_code as number, event: d.event, action: typeof d.action === 'string' ? d.action : undefined });
  }
  return out;
}

export interface RedeliveryChoice {
  /** Delivery ids to redeliver (the newest attempt of each chosen GUID), newest first. */
  readonly redeliver: number[];
  /** GUIDs past `maxAttempts` without success: logged, left to the queued-jobs fallback. */
  readonly givenUp: string[];
  /** Failed GUIDs left for a later run by the limit. */
  readonly deferred: number;
}

/**
 * A queued `workflow_job` delivery whose every attempt failed (no 2xx), is recent enough,
 * and has had fewer than `maxAttempts` attempts is redelivered, newest first, `limit` at most.
 * Other events and actions are never redelivered: the fleet acts only on "queued".
 */
export function chooseRedeliveries(deliveries: readonly ListedDelivery[], rules: RedeliveryRules): RedeliveryChoice {
  const byGuid = new Map<string, ListedDelivery[]>();
  for (const d of deliveries) {
    if (d.event !== 'workflow_job' || d.action !== 'queued') continue;
    (byGuid.get(d.guid) ?? byGuid.set(d.guid, []).get(d.guid)!).push(d);
  }
  const failed: ListedDelivery[] = [];
  const givenUp: string[] = [];
  for (const [guid, attempts] of byGuid) {
    if (attempts.some((a) => a.statusCode >= 200 && a.statusCode < 300)) continue;
    const newest = attempts.reduce((a, b) => (b.id > a.id ? b : a));
    if (newest.deliveredAt < rules.notBefore) continue;
    if (attempts.length >= rules.maxAttempts) givenUp.push(guid);
    else failed.push(newest);
  }
  failed.sort((a, b) => b.id - a.id);
  return { redeliver: failed.slice(0, rules.limit).map((d) => d.id), givenUp, deferred: Math.max(0, failed.length - rules.limit) };
}
