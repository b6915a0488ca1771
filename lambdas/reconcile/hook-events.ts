/**
 * Which of a GitLab webhook's logged events to resend, as a pure function over
 * `GET /projects/:id/hooks/:hook_id/events` (or `/groups/...`; GitLab 17.3+, the last 7 days,
 * doc/api/project_webhooks.md "Get a list of project webhook events"). Each entry is one
 * attempt: the request GitLab sent (`request_headers`, `request_data`) and what the receiver
 * answered (`response_status`, a string: "200", "500", or "internal error" when no HTTP answer
 * came). A resend (`POST .../events/:id/resend`, 17.4+) is logged as an entry of its own with
 * the original's `Idempotency-Key` (WebHooks::Events::ResendService passes the log's key),
 * so the key groups the attempts of one delivery, as a GUID does on GitHub.
 */
export interface ListedHookEvent {
  readonly id: number;
  /** The delivery the attempt belongs to: its Idempotency-Key, else the entry's own id. */
  readonly key: string;
  /** The HTTP status the webhook answered; 0 when GitLab got no answer ("internal error"). */
  readonly status: number;
  /** A Job Hook for a job waiting for a runner (`object_kind: build`, `build_status: pending`). */
  readonly pendingJob: boolean;
}

/** Parses one page of the list; entries without an id are skipped. */
export function parseHookEvents(data: unknown): ListedHookEvent[] {
  if (!Array.isArray(data)) throw new Error('the hook events answer is not a list');
  const out: ListedHookEvent[] = [];
  for (const e of data as Record<string, unknown>[]) {
    if (!Number.isSafeInteger(e?.id)) continue;
    const headers = isRecord(e.request_headers) ? e.request_headers : {};
    const keyHeader = Object.entries(headers).find(([k]) => k.toLowerCase() === 'idempotency-key')?.[1];
    const status = /^\d{3}$/.test(String(e.response_status)) ? Number(e.response_status) : 0;
    out.push({ id: e.id as number, key: typeof keyHeader === 'string' && keyHeader !== '' ? keyHeader : `event-${String(e.id)}`, status, pendingJob: isPendingJobHook(e) });
  }
  return out;
}

/** `request_data` is the payload as an object (a JSON string on some versions: both are read). */
function isPendingJobHook(e: Record<string, unknown>): boolean {
  let data = e.request_data;
  if (typeof data === 'string') {
    try {
      data = JSON.parse(data);
    } catch {
      return false;
    }
  }
  if (!isRecord(data)) return false;
  const kind = data.object_kind ?? data.event_name;
  return (e.trigger === undefined || e.trigger === 'job_hooks') && kind === 'build' && data.build_status === 'pending';
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export interface ResendRules {
  /** Resends asked for in one run at most. */
  readonly limit: number;
  /** A delivery that failed this many attempts (the first included) is given up on. */
  readonly maxAttempts: number;
}

export interface ResendChoice {
  /** Hook event ids to resend (the newest attempt of each chosen delivery), newest first. */
  readonly resend: number[];
  /** Delivery keys past `maxAttempts` without success: logged, left to the pending-jobs scan. */
  readonly givenUp: string[];
  /** Failed deliveries left for a later run by the limit. */
  readonly deferred: number;
}

/**
 * A pending-job Job Hook whose every listed attempt failed (no 2xx) and that had fewer than
 * `maxAttempts` attempts is resent, newest first, `limit` at most. Other events never are:
 * the fleet acts only on "pending".
 */
export function chooseResends(events: readonly ListedHookEvent[], rules: ResendRules): ResendChoice {
  const byKey = new Map<string, ListedHookEvent[]>();
  for (const e of events) {
    if (!e.pendingJob) continue;
    (byKey.get(e.key) ?? byKey.set(e.key, []).get(e.key)!).push(e);
  }
  const failed: ListedHookEvent[] = [];
  const givenUp: string[] = [];
  for (const [key, attempts] of byKey) {
    if (attempts.some((a) => a.status >= 200 && a.status < 300)) continue;
    if (attempts.length >= rules.maxAttempts) givenUp.push(key);
    else failed.push(attempts.reduce((a, b) => (b.id > a.id ? b : a)));
  }
  failed.sort((a, b) => b.id - a.id);
  return { resend: failed.slice(0, rules.limit).map((e) => e.id), givenUp, deferred: Math.max(0, failed.length - rules.limit) };
}
