import { QueueTokenExpiredError, SessionConflictError, SessionGoneError, type ScaleSetApi, type ScaleSetMessage, type ScaleSetSession, type ScaleSetSpec } from '../../shared/contract';
import type { AdminTokens } from './admin-token';
import { errorDetail, ScaleSetApiError } from './errors';
import { parseMessage, parseStatistics, ScaleSetMessageError } from './messages';

/** Every Actions service call names this version (client.go `newActionsServiceRequest`; the queue in `Accept`). */
export const SCALE_SET_API_VERSION = '6.0-preview';
const SCALE_SETS = '_apis/runtime/runnerscalesets';
/** GitHub's default runner group: id 1, used without a look-up (examples/dockerscaleset/main.go). */
const DEFAULT_GROUP_ID = 1;

export interface ScaleSetClientOptions {
  readonly admin: AdminTokens;
  readonly fetch: typeof fetch;
  /** Bound on one call other than GetMessage. */
  readonly timeoutMs: number;
  /** Bound on one GetMessage: beyond the service's own hold (about 50 s), so a poll ends with its 202, not our timeout. */
  readonly longPollTimeoutMs: number;
}

interface Answer {
  readonly status: number;
  readonly text: string;
}

/**
 * The scale-set half of GitHub for one scope, over `fetch` (client.go, session_client.go):
 * admin calls with the admin token (admin-token.ts), the message queue with the session's
 * queue token. A lost answer of a call that changes state is resolved by reading back where
 * the service lets us (a create reads the scale set back by name; deletes take 404 as done);
 * see docs/scale-set.md for the calls that cannot be read back.
 */
export class ScaleSetClient implements ScaleSetApi {
  constructor(private readonly options: ScaleSetClientOptions) {}

  async ensureScaleSet(spec: ScaleSetSpec): Promise<{ readonly id: number }> {
    const groupId = await this.runnerGroupId(spec.runnerGroup, true);
    const wanted = scaleSetLabels(spec);
    const found = await this.getByName(spec.name, groupId);
    if (found) {
      if (!sameLabels(found.labels, wanted)) await this.expect('update scale set', await this.admin('update scale set', 'PATCH', `${SCALE_SETS}/${found.id}`, {}, scaleSetBody(spec.name, groupId!, wanted)), [200]);
      return { id: found.id };
    }
    let created: Answer | ScaleSetApiError;
    try {
      created = await this.admin('create scale set', 'POST', SCALE_SETS, {}, scaleSetBody(spec.name, groupId!, wanted));
    } catch (e) {
      if (!(e instanceof ScaleSetApiError) || !e.lost) throw e;
      created = e;
    }
    if (!(created instanceof ScaleSetApiError) && created.status === 200) return { id: scaleSetId(created.text, 'create scale set') };
    // Lost (no answer, 5xx) or refused as existing (another creator won): what is there decides.
    if (created instanceof ScaleSetApiError || created.status >= 500 || created.status === 409) {
      const after = await this.getByName(spec.name, groupId);
      if (after) return { id: after.id };
      throw created instanceof ScaleSetApiError ? created : new ScaleSetApiError('create scale set', created.status, errorDetail(created.text));
    }
    throw new ScaleSetApiError('create scale set', created.status, errorDetail(created.text));
  }

  async findScaleSet(name: string, runnerGroup: string): Promise<{ readonly id: number } | undefined> {
    const groupId = await this.runnerGroupId(runnerGroup, false);
    if (groupId === undefined) return undefined;
    const found = await this.getByName(name, groupId);
    return found ? { id: found.id } : undefined;
  }

  async deleteScaleSet(id: number): Promise<void> {
    const answer = await this.retryLost(() => this.admin('delete scale set', 'DELETE', `${SCALE_SETS}/${id}`, {}));
    if (answer.status === 404) return;
    await this.expect('delete scale set', answer, [204]);
  }

  async createSession(scaleSetId: number, owner: string): Promise<ScaleSetSession> {
    // Not retried when lost: a session may have been made, and a second create would be refused
    // as a conflict with it until it expires (docs/scale-set.md).
    const answer = await this.admin('create session', 'POST', `${SCALE_SETS}/${scaleSetId}/sessions`, {}, { ownerName: owner });
    if (answer.status === 409) throw new SessionConflictError(scaleSetId, errorDetail(answer.text));
    await this.expect('create session', answer, [200]);
    return parseSession(answer.text, scaleSetId);
  }

  async refreshSession(scaleSetId: number, sessionId: string): Promise<ScaleSetSession> {
    const answer = await this.retryLost(() => this.admin('refresh session', 'PATCH', `${SCALE_SETS}/${scaleSetId}/sessions/${encodeURIComponent(sessionId)}`, {}));
    if (answer.status === 200) return parseSession(answer.text, scaleSetId);
    // The source names no status for an expired session (session_client.go `doSessionRequest`
    // takes every status but the expected one as an error): a refusal that is not about our
    // credential (401), our rate (429) or the service (5xx, lost) means the session is gone.
    if (answer.status === 401 || answer.status === 429 || answer.status >= 500) throw new ScaleSetApiError('refresh session', answer.status, errorDetail(answer.text));
    throw new SessionGoneError(scaleSetId, sessionId);
  }

  async deleteSession(scaleSetId: number, sessionId: string): Promise<void> {
    const answer = await this.retryLost(() => this.admin('delete session', 'DELETE', `${SCALE_SETS}/${scaleSetId}/sessions/${encodeURIComponent(sessionId)}`, {}));
    if (answer.status === 404) return;
    await this.expect('delete session', answer, [204]);
  }

  async getMessage(session: ScaleSetSession, lastMessageId: number, maxCapacity: number, signal?: AbortSignal): Promise<ScaleSetMessage | undefined> {
    const url = new URL(session.messageQueueUrl);
    if (lastMessageId > 0) url.searchParams.set('lastMessageId', String(lastMessageId));
    const timeout = AbortSignal.timeout(this.options.longPollTimeoutMs);
    let answer: Answer;
    try {
      answer = await this.send(url, {
        method: 'GET',
        headers: { accept: `application/json; api-version=${SCALE_SET_API_VERSION}`, authorization: `Bearer ${session.messageQueueAccessToken}`, 'x-scalesetmaxcapacity': String(Math.max(0, Math.floor(maxCapacity))) },
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
    } catch (e) {
      // Ended by the caller: nothing was taken from the queue that will not come again.
      if (signal?.aborted) return undefined;
      throw new ScaleSetApiError('get message', 0, (e as Error).message);
    }
    if (answer.status === 202) return undefined;
    if (answer.status === 401) throw new QueueTokenExpiredError(session.scaleSetId);
    if (answer.status === 404) throw new SessionGoneError(session.scaleSetId, session.sessionId);
    if (answer.status !== 200) throw new ScaleSetApiError('get message', answer.status, errorDetail(answer.text));
    return parseMessage(answer.text);
  }

  async deleteMessage(session: ScaleSetSession, messageId: number): Promise<void> {
    const url = new URL(session.messageQueueUrl);
    url.pathname = `${url.pathname.replace(/\/+$/, '')}/${messageId}`;
    // Deleting twice is harmless: a lost answer is asked again once.
    let sends = 0;
    const answer = await this.retryLost(async () => {
      sends++;
      try {
        return await this.send(url, { method: 'DELETE', headers: { 'content-type': 'application/json', authorization: `Bearer ${session.messageQueueAccessToken}` }, signal: AbortSignal.timeout(this.options.timeoutMs) });
      } catch (e) {
        throw new ScaleSetApiError('delete message', 0, (e as Error).message);
      }
    });
    if (answer.status === 401) throw new QueueTokenExpiredError(session.scaleSetId);
    // Resent after a lost answer: the first may have deleted it (modelled, the source is silent).
    if (answer.status === 404 && sends > 1) return;
    if (answer.status === 404) throw new SessionGoneError(session.scaleSetId, session.sessionId);
    await this.expect('delete message', answer, [204, 200]);
  }

  async generateJitConfig(scaleSetId: number, runnerName: string): Promise<{ readonly runnerId: number; readonly encodedJitConfig: string }> {
    // Not retried when lost: the runner may be registered; the sweep removes a registration
    // whose instance never came (as for the REST JIT configs, lambdas/ci/github.ts).
    const answer = await this.admin('generate JIT config', 'POST', `${SCALE_SETS}/${scaleSetId}/generatejitconfig`, {}, { name: runnerName, workFolder: '_work' });
    await this.expect('generate JIT config', answer, [200]);
    const doc = json(answer.text, 'generate JIT config') as { runner?: { id?: unknown }; encodedJITConfig?: unknown };
    const id = doc.runner?.id;
    if (!Number.isSafeInteger(id) || typeof doc.encodedJITConfig !== 'string' || doc.encodedJITConfig === '') throw new ScaleSetApiError('generate JIT config', answer.status, 'the answer lacks runner.id or encodedJITConfig');
    return { runnerId: id as number, encodedJitConfig: doc.encodedJITConfig };
  }

  /** The group's id: 1 for GitHub's default group; else looked up by name (undefined when there is none and `required` is false). */
  private async runnerGroupId(name: string, required: boolean): Promise<number | undefined> {
    if (name.toLowerCase() === 'default') return DEFAULT_GROUP_ID;
    const answer = await this.retryLost(() => this.admin('find runner group', 'GET', '_apis/runtime/runnergroups/', { groupName: name }));
    await this.expect('find runner group', answer, [200]);
    const doc = json(answer.text, 'find runner group') as { value?: { id?: unknown; name?: unknown }[] };
    const group = (doc.value ?? []).find((g) => typeof g.name === 'string' && g.name.toLowerCase() === name.toLowerCase());
    if (group && Number.isSafeInteger(group.id)) return group.id as number;
    if (required) throw new ScaleSetApiError('find runner group', answer.status, `no runner group named "${name}"`);
    return undefined;
  }

  private async getByName(name: string, groupId: number | undefined): Promise<{ id: number; labels: string[] } | undefined> {
    const answer = await this.retryLost(() => this.admin('find scale set', 'GET', SCALE_SETS, { runnerGroupId: String(groupId ?? DEFAULT_GROUP_ID), name }));
    await this.expect('find scale set', answer, [200]);
    const doc = json(answer.text, 'find scale set') as { count?: unknown; value?: { id?: unknown; name?: unknown; labels?: { name?: unknown }[] }[] };
    const found = (doc.value ?? []).filter((s) => typeof s.name === 'string' && s.name.toLowerCase() === name.toLowerCase());
    if (found.length > 1) throw new ScaleSetApiError('find scale set', answer.status, `several scale sets are named "${name}"`);
    const s = found[0];
    if (!s) return undefined;
    if (!Number.isSafeInteger(s.id)) throw new ScaleSetApiError('find scale set', answer.status, 'a scale set lacks its id');
    return { id: s.id as number, labels: (s.labels ?? []).map((l) => l.name).filter((l): l is string => typeof l === 'string') };
  }

  /** An admin call; a 401 (the admin token expired early or was revoked) exchanges the token again once. */
  private async admin(operation: string, method: string, path: string, query: Record<string, string>, body?: unknown): Promise<Answer> {
    for (let attempt = 1; ; attempt++) {
      const connection = await this.options.admin.get();
      const url = new URL(path, connection.url);
      for (const [k, v] of Object.entries(query)) url.searchParams.set(k, v);
      url.searchParams.set('api-version', SCALE_SET_API_VERSION);
      let answer: Answer;
      try {
        answer = await this.send(url, {
          method,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${connection.token}` },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          signal: AbortSignal.timeout(this.options.timeoutMs),
        });
      } catch (e) {
        throw new ScaleSetApiError(operation, 0, (e as Error).message);
      }
      if (answer.status !== 401 || attempt > 1) return answer;
      this.options.admin.invalidate(connection.token);
    }
  }

  private async send(url: URL, init: RequestInit): Promise<Answer> {
    const res = await this.options.fetch(url, { ...init, headers: { 'user-agent': 'cdk-warm-runners', ...(init.headers as Record<string, string>) } });
    return { status: res.status, text: await res.text() };
  }

  /** A call that changes nothing, or changes it to the same end however often: asked once more when its answer was lost. */
  private async retryLost(call: () => Promise<Answer>): Promise<Answer> {
    try {
      const first = await call();
      if (first.status < 500) return first;
    } catch (e) {
      if (!(e instanceof ScaleSetApiError) || !e.lost) throw e;
    }
    return call();
  }

  private async expect(operation: string, answer: Answer, ok: number[]): Promise<void> {
    if (!ok.includes(answer.status)) throw new ScaleSetApiError(operation, answer.status, errorDetail(answer.text));
  }
}

/** The scale set's labels: its name (what `runs-on` names) and the pool's labels, once each; `self-hosted` is every runner's already. */
export function scaleSetLabels(spec: ScaleSetSpec): string[] {
  const out = new Map<string, string>();
  for (const l of [spec.name, ...spec.labels]) if (l.toLowerCase() !== 'self-hosted' && !out.has(l.toLowerCase())) out.set(l.toLowerCase(), l);
  return [...out.values()];
}

function sameLabels(a: readonly string[], b: readonly string[]): boolean {
  const norm = (x: readonly string[]) => [...new Set(x.map((l) => l.toLowerCase()))].sort().join('\n');
  return norm(a) === norm(b);
}

/** The body of a create or update (types.go `RunnerScaleSet`): ephemeral JIT runners that never update themselves (the fleet pins the runner release). */
function scaleSetBody(name: string, runnerGroupId: number, labels: string[]): Record<string, unknown> {
  return { name, runnerGroupId, labels: labels.map((l) => ({ type: 'System', name: l })), RunnerSetting: { ephemeral: true, isElastic: true, disableUpdate: true } };
}

function json(text: string, operation: string): Record<string, unknown> {
  try {
    const doc: unknown = JSON.parse(text.replace(/^\uFEFF/, ''));
    if (typeof doc === 'object' && doc !== null && !Array.isArray(doc)) return doc as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw new ScaleSetApiError(operation, 200, 'the answer is not a JSON object');
}

function scaleSetId(text: string, operation: string): number {
  const id = json(text, operation).id;
  if (!Number.isSafeInteger(id)) throw new ScaleSetApiError(operation, 200, 'the answer lacks the scale set id');
  return id as number;
}

/** types.go `RunnerScaleSetSession`. */
function parseSession(text: string, scaleSetId: number): ScaleSetSession {
  const doc = json(text, 'session');
  const { sessionId, messageQueueUrl, messageQueueAccessToken } = doc;
  if (typeof sessionId !== 'string' || sessionId === '' || typeof messageQueueUrl !== 'string' || typeof messageQueueAccessToken !== 'string' || messageQueueAccessToken === '') {
    throw new ScaleSetMessageError('the session answer lacks sessionId, messageQueueUrl or messageQueueAccessToken');
  }
  // `types.go` declares the session's statistics a pointer: absent, the listener waits for a message.
  const statistics = doc.statistics === undefined || doc.statistics === null ? undefined : parseStatistics(doc.statistics, `session ${sessionId}`);
  return { sessionId, scaleSetId, messageQueueUrl, messageQueueAccessToken, ...(statistics ? { statistics } : {}) };
}
