import {
  QueueTokenExpiredError,
  SessionConflictError,
  SessionGoneError,
  type ScaleSetApi,
  type ScaleSetJobEvent,
  type ScaleSetMessage,
  type ScaleSetSession,
  type ScaleSetSpec,
  type ScaleSetStatistics,
} from '../../lambdas/shared/contract';

export function statistics(assigned: number): ScaleSetStatistics {
  return { totalAvailableJobs: 0, totalAcquiredJobs: 0, totalAssignedJobs: assigned, totalRunningJobs: 0, totalRegisteredRunners: 0, totalBusyRunners: 0, totalIdleRunners: 0 };
}

/**
 * An in-memory scale set service, as the contract's doc comments describe GitHub's
 * (`ScaleSetApi`): one active session per scale set (a second create is a
 * `SessionConflictError`), a session deleted or unknown is a `SessionGoneError`, a queue token
 * past its life is a `QueueTokenExpiredError`, and a message not acknowledged is delivered
 * again to whoever asks after the message id before it. `getMessage` on an empty queue waits
 * for a message or the signal (the long poll), then answers undefined (HTTP 202).
 *
 * It also watches the property the lease must give: two polls at once (a `getMessage` while
 * another is in flight, on another session or the same one) are recorded in `violations`.
 */
export class FakeScaleSet implements ScaleSetApi {
  readonly sets = new Map<string, number>();
  /** The active session per scale set. */
  readonly active = new Map<number, { sessionId: string; token: string; owner: string }>();
  readonly messages = new Map<number, ScaleSetMessage[]>();
  readonly acknowledged = new Set<number>();
  readonly jitNames: string[] = [];
  readonly calls: string[] = [];
  violations: string[] = [];
  private inFlight = new Map<string, number>();
  private next = 1;
  private tokens = 0;
  /** Longest an empty poll waits (ms) when the caller's signal is later. */
  emptyWaitMs = 20;
  /** What a session's answer says is assigned: the newest message's reading unless set; 'none': the answer carries no statistics. */
  sessionAssigned?: number | 'none';
  private waiters: (() => void)[] = [];

  constructor(names: readonly string[] = ['linux-set']) {
    for (const n of names) this.sets.set(n, this.next++);
  }

  /** Queues a message (its id the next one) for scale set `id`. */
  push(id: number, assigned: number, events: ScaleSetJobEvent[] = []): number {
    const messageId = this.next++;
    const list = this.messages.get(id) ?? [];
    list.push({ messageId, statistics: statistics(assigned), events });
    this.messages.set(id, list);
    for (const w of this.waiters.splice(0)) w();
    return messageId;
  }

  /** The active session's queue token expires now. */
  expireToken(id: number): void {
    const s = this.active.get(id);
    if (s) s.token = `expired-${s.token}`;
  }

  ensureScaleSet(spec: ScaleSetSpec): Promise<{ id: number }> {
    if (!this.sets.has(spec.name)) this.sets.set(spec.name, this.next++);
    return Promise.resolve({ id: this.sets.get(spec.name)! });
  }

  findScaleSet(name: string): Promise<{ id: number } | undefined> {
    this.calls.push('findScaleSet');
    const id = this.sets.get(name);
    return Promise.resolve(id === undefined ? undefined : { id });
  }

  deleteScaleSet(id: number): Promise<void> {
    for (const [n, i] of this.sets) if (i === id) this.sets.delete(n);
    return Promise.resolve();
  }

  async createSession(scaleSetId: number, owner: string): Promise<ScaleSetSession> {
    this.calls.push('createSession');
    await tick();
    if (this.active.has(scaleSetId)) throw new SessionConflictError(scaleSetId, 'conflict');
    const s = { sessionId: `session-${this.next++}`, token: `token-${++this.tokens}`, owner };
    this.active.set(scaleSetId, s);
    return this.sessionOf(scaleSetId, s);
  }

  async refreshSession(scaleSetId: number, sessionId: string): Promise<ScaleSetSession> {
    this.calls.push('refreshSession');
    await tick();
    const s = this.active.get(scaleSetId);
    if (s?.sessionId !== sessionId) throw new SessionGoneError(scaleSetId, sessionId);
    s.token = `token-${++this.tokens}`;
    return this.sessionOf(scaleSetId, s);
  }

  async deleteSession(scaleSetId: number, sessionId: string): Promise<void> {
    this.calls.push('deleteSession');
    await tick();
    if (this.active.get(scaleSetId)?.sessionId === sessionId) this.active.delete(scaleSetId);
  }

  async getMessage(session: ScaleSetSession, lastMessageId: number, _maxCapacity: number, signal?: AbortSignal): Promise<ScaleSetMessage | undefined> {
    this.calls.push('getMessage');
    this.check(session);
    // One poller per scale set: a second poll in flight, of another session or of the same one, is two pollers.
    for (const [other, n] of this.inFlight) if (n > 0) this.violations.push(`${session.sessionId} polled while ${other} was polling`);
    this.inFlight.set(session.sessionId, (this.inFlight.get(session.sessionId) ?? 0) + 1);
    try {
      for (;;) {
        this.check(session);
        const m = (this.messages.get(session.scaleSetId) ?? []).find((x) => x.messageId > lastMessageId && !this.acknowledged.has(x.messageId));
        if (m) return m;
        if (signal?.aborted) throw Object.assign(new Error('aborted'), { name: 'AbortError' });
        const waited = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => resolve(false), this.emptyWaitMs);
          this.waiters.push(() => {
            clearTimeout(timer);
            resolve(true);
          });
          signal?.addEventListener('abort', () => {
            clearTimeout(timer);
            resolve(true);
          });
        });
        if (!waited) return undefined;
      }
    } finally {
      this.inFlight.set(session.sessionId, this.inFlight.get(session.sessionId)! - 1);
    }
  }

  async deleteMessage(session: ScaleSetSession, messageId: number): Promise<void> {
    this.calls.push('deleteMessage');
    await tick();
    this.check(session);
    this.acknowledged.add(messageId);
  }

  async generateJitConfig(_scaleSetId: number, runnerName: string): Promise<{ runnerId: number; encodedJitConfig: string }> {
    this.jitNames.push(runnerName);
    return { runnerId: 1000 + this.jitNames.length, encodedJitConfig: `jit-${runnerName}` };
  }

  private check(session: ScaleSetSession): void {
    const s = this.active.get(session.scaleSetId);
    if (s?.sessionId !== session.sessionId) throw new SessionGoneError(session.scaleSetId, session.sessionId);
    if (s.token !== session.messageQueueAccessToken) throw new QueueTokenExpiredError(session.scaleSetId);
  }

  private sessionOf(scaleSetId: number, s: { sessionId: string; token: string }): ScaleSetSession {
    // The scale set's statistics now: the newest message's, acknowledged or not.
    const assigned = this.sessionAssigned ?? (this.messages.get(scaleSetId) ?? []).at(-1)?.statistics.totalAssignedJobs ?? 0;
    const session = { sessionId: s.sessionId, scaleSetId, messageQueueUrl: `https://queue/${scaleSetId}`, messageQueueAccessToken: s.token };
    return assigned === 'none' ? session : { ...session, statistics: statistics(assigned) };
  }
}

const tick = () => new Promise<void>((r) => setImmediate(r));
