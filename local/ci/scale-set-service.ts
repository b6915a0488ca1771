import { randomUUID } from 'node:crypto';
import { jsonObject, randomToken, type HttpAnswer, type HttpRequest } from './http';

/**
 * The runner scale set half of the loopback GitHub (mounted by github-server.ts), as the
 * client `actions/scaleset` speaks it (docs/scale-set.md, "The protocol we rely on"):
 *
 * - `POST {api}/{scope}/actions/runners/registration-token` (REST, installation token) and
 *   `POST {api}/actions/runner-registration` (`RemoteAuth <registration token>`, body
 *   `{url, runner_event}`): the Actions service's URL and an admin token (a JWT whose `exp` the
 *   client reads);
 * - the Actions service under `/_actions/<tenant>/`: runner groups, scale set CRUD, message
 *   sessions (one active per scale set: a second create is 409), the message queue (long poll,
 *   202 when nothing came, 401 for an expired queue token, redelivery of what was not deleted),
 *   just-in-time runner configs. Every service call needs `api-version=6.0-preview` (the queue
 *   reads it from `Accept`), as the client sends it.
 *
 * The job model: GitHub's docs ("Using Actions Runner Controller runners in a workflow") say a
 * workflow targets a scale set by its name in `runs-on`, or by its labels given as the
 * `runs-on` array. Modelled as GitHub matches any runner: a queued job in a scale set's scope
 * whose every `runs-on` label is one of the scale set's labels (its name is one) or
 * `self-hosted` (unverified for scale sets), and at least one is the scale set's, is ASSIGNED
 * to it (the lowest id when several match): no other runner takes it, and a runner of the
 * scale set takes whichever assigned job is oldest. The fleet's scale sets carry their name
 * as their only label, so under this rule and under an exact-set one alike they are assigned
 * exactly the jobs naming them (docs/scale-set.md, "Which jobs a scale set gets"). Assignment, start and
 * completion are events of the active session's queue; events while no session is open are
 * not kept for the next (the statistics in its answer make up for them).
 */
export interface ScaleSetServiceOptions {
  /** How long GetMessage holds a poll with nothing to deliver before 202 (default 50 s, as the service's long poll). */
  readonly longPollSeconds?: number;
  /** A session whose owner has not polled for this long expires (default 120 s). */
  readonly sessionIdleSeconds?: number;
  /** A message queue token's life (default 3600 s); refreshing the session gives a new one. */
  readonly queueTokenSeconds?: number;
  /** The admin token's life (default 3600 s). */
  readonly adminTokenSeconds?: number;
  /** Runner groups besides GitHub's default ("Default", id 1), ids from 2 in order. */
  readonly runnerGroups?: readonly string[];
}

/** What the service needs of the GitHub it is part of. */
export interface ScaleSetHost {
  /** The server's base URL. */
  base(): string;
  now(): number;
  /** "org:<login>" or "owner/repo" (lower case) for a configuration URL's path, when the App is installed there. */
  scopeOfPath(path: string): string | undefined;
  /** Whether a job of `repository` lies in `scope`. */
  inScope(scope: string, repository: string): boolean;
  /** Every job, as the server holds them. */
  jobs(): Iterable<ScaleSetJobView>;
  /** Registers a just-in-time runner of the scale set; 'exists' when the name is taken in the scope. */
  registerRunner(scope: string, name: string, labels: string[], runnerGroupId: number, scaleSetId: number): { id: number; secret: string } | 'exists';
  /** The scale set's runners as the server holds them. */
  runners(scaleSetId: number): Iterable<{ readonly busy: boolean; readonly status: string }>;
  /** Logs a request (the Actions service's answers count in the request budget too). */
  log(req: HttpRequest, status: number): void;
}

export interface ScaleSetJobView {
  readonly id: number;
  readonly runId: number;
  readonly repository: string;
  readonly labels: readonly string[];
  readonly status: 'queued' | 'in_progress' | 'completed';
  readonly createdAt: string;
}

/** A scale set as the loopback holds it. */
export interface LoopbackScaleSet {
  readonly id: number;
  readonly scope: string;
  readonly name: string;
  readonly runnerGroupId: number;
  readonly labels: readonly string[];
  /** The active session, if any: its owner and the capacity its last poll announced. */
  readonly session?: { readonly id: string; readonly owner: string; readonly maxCapacity?: number };
  /** Ids of the jobs assigned to it, in assignment order (completed ones included). */
  readonly assignedJobs: readonly number[];
}

/** What a test sees and steers of the scale-set service. */
export interface LoopbackScaleSets {
  list(): LoopbackScaleSet[];
  /** The scale set a job was assigned to, if any. */
  assignedTo(jobId: number): number | undefined;
  /** Messages delivered so far (redeliveries included), in order. */
  delivered(): { readonly scaleSetId: number; readonly messageId: number; readonly redelivery: boolean }[];
  /** Fault: the scale set's active session expires now (its owner's next call finds it gone: 404). */
  expireSession(scaleSetId: number): void;
  /** Fault: the active session's queue token expires now (GetMessage/DeleteMessage answer 401 until a refresh). */
  expireQueueToken(scaleSetId: number): void;
  /**
   * Fault: the next `count` (default 1) DeleteMessage calls of the scale set answer 503.
   * `after`: the message was deleted first (the acknowledgement took, its answer was lost);
   * `before`: it was not (the message is delivered again). The client asks once more after a
   * lost answer, so a lost acknowledgement reaches the listener only with a count of 2 or more.
   */
  dropNextAck(scaleSetId: number, when: 'before' | 'after', count?: number): void;
  /** The most GetMessage polls of the scale set in flight at once (any session): 1 when one poller at a time held it. */
  peakPolls(scaleSetId: number): number;
  /** GetMessage polls of the scale set in flight now (0 for a scale set gone). */
  polls(scaleSetId: number): number;
  /** JIT configs generated for the scale set so far: the runners it registered (kept after its Delete). */
  runnersRegistered(scaleSetId: number): number;
  /** Fault: another owner holds a session of the scale set (the next create is 409 until it expires or is deleted). */
  holdSession(scaleSetId: number, owner: string): void;
  /** Every session the service opened, in order: its owner, when it opened and when and how it ended. */
  sessions(): LoopbackSessionRecord[];
}

/** One session's life at the loopback (epoch ms). */
export interface LoopbackSessionRecord {
  readonly scaleSetId: number;
  readonly sessionId: string;
  readonly owner: string;
  readonly openedAt: number;
  readonly endedAt?: number;
  /** deleted: by its owner; expired: idle past the bound or the fault; scale-set-deleted: with its scale set. */
  readonly ended?: 'deleted' | 'expired' | 'scale-set-deleted';
}

const API_VERSION = '6.0-preview';
const MESSAGE_TYPE = 'RunnerScaleSetJobMessages';

interface JobEvent {
  readonly messageType: 'JobAssigned' | 'JobStarted' | 'JobCompleted';
  readonly [key: string]: unknown;
}

interface Message {
  readonly id: number;
  readonly events: readonly JobEvent[];
  /**
   * The statistics when the message was made: a message delivered again carries these, not
   * fresh ones (the source does not say a redelivery's statistics are recomputed; the session's
   * answer to a create or refresh is the fresh reading).
   */
  readonly statistics: Record<string, number>;
  delivered: boolean;
}

interface Session {
  readonly id: string;
  readonly owner: string;
  token: string;
  tokenExpiresAt: number;
  lastPoll: number;
  polling: number;
  maxCapacity?: number;
  pending: JobEvent[];
  unacked: Message[];
  dropAck?: { readonly when: 'before' | 'after'; left: number };
  wake: Set<() => void>;
}

interface ScaleSetState {
  readonly id: number;
  readonly scope: string;
  name: string;
  runnerGroupId: number;
  labels: string[];
  settings: Record<string, unknown>;
  readonly createdOn: string;
  session?: Session;
  nextMessageId: number;
  readonly assigned: number[];
  /** GetMessage polls in flight now, and the most at once. */
  polls: number;
  peakPolls: number;
}

export interface ScaleSetService {
  /** The answer to a request of the service's, undefined for a path that is not one. */
  route(req: HttpRequest): HttpAnswer | Promise<HttpAnswer> | undefined;
  /** `POST {scope}/actions/runners/registration-token` of an installation of `scope`. */
  registrationToken(scope: string): HttpAnswer;
  /** The server's jobs changed (a job queued or cancelled): assign, wake pollers. */
  jobsChanged(): void;
  /** Whether a job is assigned to a scale set (no runner outside it takes it). */
  isAssigned(jobId: number): boolean;
  /** The oldest queued job assigned to the scale set. */
  jobFor<J extends ScaleSetJobView>(scaleSetId: number, waiting: readonly J[]): J | undefined;
  jobStarted(job: ScaleSetJobView, runner: { id: number; name: string }): void;
  jobCompleted(job: ScaleSetJobView, runner: { id: number; name: string }, result: 'succeeded' | 'failed' | 'canceled'): void;
  readonly hooks: LoopbackScaleSets;
}

export function scaleSetService(host: ScaleSetHost, opts: ScaleSetServiceOptions = {}): ScaleSetService {
  const longPollMs = (opts.longPollSeconds ?? 50) * 1000;
  const idleMs = (opts.sessionIdleSeconds ?? 120) * 1000;
  const queueTokenMs = (opts.queueTokenSeconds ?? 3600) * 1000;
  const adminTokenMs = (opts.adminTokenSeconds ?? 3600) * 1000;
  const groups = new Map<number, string>([[1, 'Default'], ...(opts.runnerGroups ?? []).map((g, i) => [i + 2, g] as [number, string])]);
  const tenant = randomToken('', 6).replace(/[^A-Za-z0-9]/g, 'x');
  const prefix = `/_actions/${tenant}`;
  /** Registration tokens and admin tokens -> their scope and expiry. */
  const registrationTokens = new Map<string, { scope: string; expiresAt: number }>();
  const adminTokens = new Map<string, { scope: string; expiresAt: number }>();
  const scaleSets = new Map<number, ScaleSetState>();
  /** Job id -> scale set id. */
  const assignment = new Map<number, number>();
  const delivered: { scaleSetId: number; messageId: number; redelivery: boolean }[] = [];
  const sessionLog: { scaleSetId: number; sessionId: string; owner: string; openedAt: number; endedAt?: number; ended?: LoopbackSessionRecord['ended'] }[] = [];
  /** Scale set id -> JIT configs generated for it (outlives the scale set: the proof reads it after the Delete). */
  const jitConfigs = new Map<number, number>();
  let nextScaleSetId = 1;

  const exception = (status: number, typeName: string, message: string): HttpAnswer => ({ status, body: { typeName, message } });
  const notFound = (what: string) => exception(404, 'RunnerScaleSetNotFoundException', what);

  /** Expires sessions whose owner went silent, assigns queued jobs: judged on every request, so no timer outlives the server. */
  function settle(): void {
    const t = host.now();
    for (const s of scaleSets.values()) {
      const session = s.session;
      if (session && session.polling === 0 && t - session.lastPoll > idleMs) endSession(s, 'expired');
    }
    assignQueued();
  }

  function endSession(s: ScaleSetState, why: NonNullable<LoopbackSessionRecord['ended']>): void {
    const session = s.session;
    if (!session) return;
    delete s.session;
    const record = sessionLog.find((r) => r.sessionId === session.id);
    if (record) Object.assign(record, { endedAt: host.now(), ended: why });
    for (const wake of session.wake) wake();
  }

  function matches(s: ScaleSetState, job: ScaleSetJobView): boolean {
    if (!host.inScope(s.scope, job.repository)) return false;
    const own = new Set(s.labels.map((l) => l.toLowerCase()));
    const labels = job.labels.map((l) => l.toLowerCase());
    return labels.some((l) => own.has(l)) && labels.every((l) => own.has(l) || l === 'self-hosted');
  }

  function assignQueued(): void {
    const sets = [...scaleSets.values()].sort((a, b) => a.id - b.id);
    for (const job of host.jobs()) {
      if (job.status !== 'queued' || assignment.has(job.id)) continue;
      const s = sets.find((x) => matches(x, job));
      if (!s) continue;
      assignment.set(job.id, s.id);
      s.assigned.push(job.id);
      emit(s, { messageType: 'JobAssigned', ...jobFields(job) });
    }
  }

  function jobFields(job: ScaleSetJobView): Record<string, unknown> {
    const [owner, repo] = job.repository.split('/');
    return {
      runnerRequestId: job.id,
      repositoryName: repo,
      ownerName: owner,
      jobId: String(job.id),
      jobWorkflowRef: `${job.repository}/.github/workflows/ci.yml@refs/heads/main`,
      jobDisplayName: 'build',
      workflowRunId: job.runId,
      eventName: 'push',
      requestLabels: [...job.labels],
      queueTime: job.createdAt,
    };
  }

  function emit(s: ScaleSetState, event: JobEvent): void {
    const session = s.session;
    if (!session) return;
    session.pending.push(event);
    for (const wake of session.wake) wake();
  }

  function statistics(s: ScaleSetState): Record<string, number> {
    const jobs = new Map([...host.jobs()].map((j) => [j.id, j]));
    const open = s.assigned.map((id) => jobs.get(id)).filter((j) => j !== undefined && j.status !== 'completed') as ScaleSetJobView[];
    const runners = [...host.runners(s.id)];
    const running = open.filter((j) => j.status === 'in_progress').length;
    return {
      totalAvailableJobs: 0,
      totalAcquiredJobs: open.length - running,
      totalAssignedJobs: open.length,
      totalRunningJobs: running,
      totalRegisteredRunners: runners.length,
      totalBusyRunners: runners.filter((r) => r.busy).length,
      totalIdleRunners: runners.filter((r) => !r.busy && r.status === 'online').length,
    };
  }

  function scaleSetJson(s: ScaleSetState): Record<string, unknown> {
    return {
      id: s.id,
      name: s.name,
      runnerGroupId: s.runnerGroupId,
      runnerGroupName: groups.get(s.runnerGroupId),
      labels: s.labels.map((name) => ({ type: 'System', name })),
      RunnerSetting: s.settings,
      createdOn: s.createdOn,
      runnerJitConfigUrl: `${host.base()}${prefix}/_apis/runtime/runnerscalesets/${s.id}/generatejitconfig`,
      statistics: statistics(s),
    };
  }

  function sessionJson(s: ScaleSetState, session: Session): Record<string, unknown> {
    return {
      sessionId: session.id,
      ownerName: session.owner,
      runnerScaleSet: scaleSetJson(s),
      messageQueueUrl: `${host.base()}${prefix}/_apis/runtime/runnerscalesets/${s.id}/sessions/${session.id}/messages`,
      messageQueueAccessToken: session.token,
      statistics: statistics(s),
    };
  }

  function newSession(s: ScaleSetState, owner: string): Session {
    const session: Session = {
      id: randomUUID(),
      owner,
      token: randomToken('mq_', 24),
      tokenExpiresAt: host.now() + queueTokenMs,
      lastPoll: host.now(),
      polling: 0,
      pending: [],
      unacked: [],
      wake: new Set(),
    };
    s.session = session;
    sessionLog.push({ scaleSetId: s.id, sessionId: session.id, owner, openedAt: host.now() });
    return session;
  }

  function adminJwt(scope: string): string {
    const iat = Math.floor(host.now() / 1000);
    const exp = iat + Math.floor(adminTokenMs / 1000);
    const part = (o: unknown) => Buffer.from(JSON.stringify(o)).toString('base64url');
    const token = `${part({ alg: 'RS256', typ: 'JWT' })}.${part({ iss: 'loopback', iat, exp, scp: scope })}.${randomToken('', 32)}`;
    adminTokens.set(token, { scope, expiresAt: exp * 1000 });
    return token;
  }

  /** `POST /actions/runner-registration`: the admin connection for the scope the registration token was minted for. */
  function runnerRegistration(req: HttpRequest): HttpAnswer {
    if (req.method !== 'POST') return { status: 404, body: { message: 'Not Found' } };
    const m = /^RemoteAuth\s+(\S+)$/i.exec(req.headers.authorization ?? '');
    const held = m ? registrationTokens.get(m[1]!) : undefined;
    if (!held || held.expiresAt <= host.now()) return { status: 401, body: { message: 'Bad credentials' } };
    const body = jsonObject(req.body);
    if (!body || typeof body.url !== 'string' || body.runner_event !== 'register') return { status: 400, body: { message: 'body must be {"url": <configuration URL>, "runner_event": "register"}' } };
    let path: string;
    try {
      path = new URL(body.url).pathname;
    } catch {
      return { status: 400, body: { message: `"${body.url}" is not a URL` } };
    }
    // The token reaches the scope it was minted for only.
    if (host.scopeOfPath(path) !== held.scope) return { status: 404, body: { message: 'Not Found' } };
    return { status: 201, body: { url: `${host.base()}${prefix}/`, token: adminJwt(held.scope) } };
  }

  function route(req: HttpRequest): HttpAnswer | Promise<HttpAnswer> | undefined {
    if (req.path === '/actions/runner-registration') return logged(req, runnerRegistration(req));
    if (!req.path.startsWith(`${prefix}/`)) return undefined;
    settle();
    const rest = req.path.slice(prefix.length);
    const queue = /^\/_apis\/runtime\/runnerscalesets\/(\d+)\/sessions\/([0-9a-f-]+)\/messages(?:\/(\d+))?$/.exec(rest);
    if (queue) {
      const answer = messageQueue(req, Number(queue[1]), queue[2]!, queue[3] === undefined ? undefined : Number(queue[3]));
      return answer instanceof Promise ? answer.then((a) => logged(req, a)) : logged(req, answer);
    }
    return logged(req, adminRoute(req, rest));
  }

  function logged(req: HttpRequest, answer: HttpAnswer): HttpAnswer {
    host.log(req, answer.status);
    return answer;
  }

  function adminRoute(req: HttpRequest, rest: string): HttpAnswer {
    const version = req.query.get('api-version');
    if (version === null) return exception(400, 'VssVersionNotSpecifiedException', 'The api-version query parameter is required');
    if (version !== API_VERSION) return exception(400, 'VssInvalidPreviewVersionException', `api-version ${version} is not supported`);
    const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
    if (bearer === undefined) return exception(401, 'UnauthorizedRequestException', 'Authorization required');
    const admin = adminTokens.get(bearer);
    if (!admin || admin.expiresAt <= host.now()) return exception(401, 'UnauthorizedRequestException', 'The admin token is invalid or expired');
    const scope = admin.scope;
    const body = req.body === '' ? undefined : jsonObject(req.body);
    if (req.body !== '' && body === undefined) return exception(400, 'ArgumentException', 'The body is not a JSON object');
    let m: RegExpExecArray | null;
    if (/^\/_apis\/runtime\/runnergroups\/?$/.test(rest) && req.method === 'GET') {
      const name = req.query.get('groupName') ?? '';
      const found = [...groups].filter(([, g]) => g.toLowerCase() === name.toLowerCase());
      return { status: 200, body: { count: found.length, value: found.map(([id, g]) => ({ id, name: g, size: 0, isDefaultGroup: id === 1 })) } };
    }
    if (/^\/_apis\/runtime\/runnerscalesets\/?$/.test(rest)) {
      if (req.method === 'GET') {
        const name = req.query.get('name');
        const group = req.query.get('runnerGroupId');
        const found = [...scaleSets.values()].filter((s) => s.scope === scope && (name === null || s.name.toLowerCase() === name.toLowerCase()) && (group === null || String(s.runnerGroupId) === group));
        return { status: 200, body: { count: found.length, value: found.map(scaleSetJson) } };
      }
      if (req.method === 'POST') return createScaleSet(scope, body);
    }
    if ((m = /^\/_apis\/runtime\/runnerscalesets\/(\d+)(\/.*)?$/.exec(rest))) {
      const s = scaleSets.get(Number(m[1]));
      if (!s || s.scope !== scope) return notFound(`runner scale set ${m[1]} not found`);
      const sub = m[2] ?? '';
      if (sub === '' && req.method === 'GET') return { status: 200, body: scaleSetJson(s) };
      if (sub === '' && req.method === 'PATCH') return updateScaleSet(s, body);
      if (sub === '' && req.method === 'DELETE') {
        endSession(s, 'scale-set-deleted');
        scaleSets.delete(s.id);
        return { status: 204 };
      }
      if (sub === '/generatejitconfig' && req.method === 'POST') return generateJitConfig(s, body);
      if (sub === '/sessions' && req.method === 'POST') {
        if (typeof body?.ownerName !== 'string' || body.ownerName === '') return exception(400, 'ArgumentException', 'ownerName is required');
        if (s.session) return exception(409, 'TaskAgentSessionConflictException', `The scale set already has an active session owned by ${s.session.owner}`);
        return { status: 200, body: sessionJson(s, newSession(s, body.ownerName)) };
      }
      const sm = /^\/sessions\/([0-9a-f-]+)$/.exec(sub);
      if (sm) {
        const session = s.session?.id === sm[1] ? s.session : undefined;
        if (!session) return exception(404, 'TaskAgentSessionExpiredException', `session ${sm[1]} not found`);
        if (req.method === 'PATCH') {
          session.token = randomToken('mq_', 24);
          session.tokenExpiresAt = host.now() + queueTokenMs;
          session.lastPoll = host.now();
          return { status: 200, body: sessionJson(s, session) };
        }
        if (req.method === 'DELETE') {
          endSession(s, 'deleted');
          return { status: 204 };
        }
      }
    }
    return exception(404, 'NotFoundException', `${req.method} ${rest} is not a route of the Actions service`);
  }

  function labelsOf(body: Record<string, unknown>): string[] | undefined {
    if (!Array.isArray(body.labels)) return undefined;
    const names = body.labels.map((l) => (typeof l === 'object' && l !== null ? (l as { name?: unknown }).name : undefined));
    return names.every((n): n is string => typeof n === 'string' && n !== '') ? [...new Set(names)] : undefined;
  }

  function createScaleSet(scope: string, body: Record<string, unknown> | undefined): HttpAnswer {
    if (!body || typeof body.name !== 'string' || body.name === '' || body.name.length > 45) return exception(400, 'ArgumentException', 'name must be a string of 1 to 45 characters');
    if (!Number.isSafeInteger(body.runnerGroupId) || !groups.has(body.runnerGroupId as number)) return exception(404, 'RunnerGroupNotFoundException', `runner group ${String(body.runnerGroupId)} not found`);
    const labels = labelsOf(body);
    if (!labels || labels.length === 0) return exception(400, 'ArgumentException', 'labels must be 1 or more {name, type}');
    const name = body.name;
    if ([...scaleSets.values()].some((s) => s.scope === scope && s.runnerGroupId === body.runnerGroupId && s.name.toLowerCase() === name.toLowerCase())) {
      return exception(409, 'RunnerScaleSetExistsException', `a runner scale set named ${name} already exists in the runner group`);
    }
    const s: ScaleSetState = {
      id: nextScaleSetId++,
      scope,
      name,
      runnerGroupId: body.runnerGroupId as number,
      labels,
      settings: typeof body.RunnerSetting === 'object' && body.RunnerSetting !== null ? (body.RunnerSetting as Record<string, unknown>) : {},
      createdOn: new Date(host.now()).toISOString(),
      nextMessageId: 1,
      assigned: [],
      polls: 0,
      peakPolls: 0,
    };
    scaleSets.set(s.id, s);
    assignQueued();
    return { status: 200, body: scaleSetJson(s) };
  }

  function updateScaleSet(s: ScaleSetState, body: Record<string, unknown> | undefined): HttpAnswer {
    if (!body) return exception(400, 'ArgumentException', 'a body is required');
    if (body.name !== undefined) {
      if (typeof body.name !== 'string' || body.name === '' || body.name.length > 45) return exception(400, 'ArgumentException', 'name must be a string of 1 to 45 characters');
      s.name = body.name;
    }
    if (body.runnerGroupId !== undefined) {
      if (!Number.isSafeInteger(body.runnerGroupId) || !groups.has(body.runnerGroupId as number)) return exception(404, 'RunnerGroupNotFoundException', `runner group ${String(body.runnerGroupId)} not found`);
      s.runnerGroupId = body.runnerGroupId as number;
    }
    if (body.labels !== undefined) {
      const labels = labelsOf(body);
      if (!labels || labels.length === 0) return exception(400, 'ArgumentException', 'labels must be 1 or more {name, type}');
      s.labels = labels;
    }
    if (typeof body.RunnerSetting === 'object' && body.RunnerSetting !== null) s.settings = body.RunnerSetting as Record<string, unknown>;
    assignQueued();
    return { status: 200, body: scaleSetJson(s) };
  }

  function generateJitConfig(s: ScaleSetState, body: Record<string, unknown> | undefined): HttpAnswer {
    if (!body || typeof body.name !== 'string' || body.name === '' || body.name.length > 64) return exception(400, 'ArgumentException', 'name must be a string of 1 to 64 characters');
    if (body.workFolder !== undefined && typeof body.workFolder !== 'string') return exception(400, 'ArgumentException', 'workFolder must be a string');
    const registered = host.registerRunner(s.scope, body.name, s.labels, s.runnerGroupId, s.id);
    if (registered === 'exists') return exception(409, 'AgentExistsException', `a runner named ${body.name} already exists`);
    jitConfigs.set(s.id, (jitConfigs.get(s.id) ?? 0) + 1);
    // The shape the fake runner decodes (github-server.ts LocalJitConfig).
    const config = { url: host.base(), runnerId: registered.id, name: body.name, secret: registered.secret };
    return { status: 200, body: { runner: { id: registered.id, name: body.name, runnerScaleSetId: s.id }, encodedJITConfig: Buffer.from(JSON.stringify(config)).toString('base64') } };
  }

  function messageQueue(req: HttpRequest, scaleSetId: number, sessionId: string, messageId: number | undefined): HttpAnswer | Promise<HttpAnswer> {
    const s = scaleSets.get(scaleSetId);
    const session = s?.session?.id === sessionId ? s.session : undefined;
    const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
    if (bearer === undefined) return exception(401, 'UnauthorizedRequestException', 'Authorization required');
    if (!s || !session) return exception(404, 'TaskAgentSessionExpiredException', `session ${sessionId} not found`);
    if (bearer !== session.token || session.tokenExpiresAt <= host.now()) return { status: 401, headers: { 'content-type': 'text/plain' }, body: 'The message queue token has expired' };
    if (req.method === 'DELETE' && messageId !== undefined) {
      if (req.headers['content-type'] !== undefined && !/json/i.test(req.headers['content-type'])) return exception(415, 'UnsupportedMediaTypeException', 'content-type must be JSON');
      const drop = session.dropAck?.when;
      if (session.dropAck && --session.dropAck.left <= 0) delete session.dropAck;
      if (drop === 'before') return exception(503, 'ServiceUnavailableException', 'injected: acknowledgement lost before it was applied');
      session.unacked = session.unacked.filter((m) => m.id !== messageId);
      if (drop === 'after') return exception(503, 'ServiceUnavailableException', 'injected: acknowledgement applied, answer lost');
      return { status: 204 };
    }
    if (req.method !== 'GET' || messageId !== undefined) return exception(404, 'NotFoundException', 'not a message queue route');
    const version = /api-version=([^;,\s]+)/.exec(String(req.headers.accept ?? ''))?.[1];
    if (version !== API_VERSION) return exception(400, 'VssVersionNotSpecifiedException', `the Accept header must name api-version=${API_VERSION}`);
    const capacity = req.headers['x-scalesetmaxcapacity'];
    if (capacity !== undefined) {
      if (typeof capacity !== 'string' || !/^\d+$/.test(capacity)) return exception(400, 'ArgumentException', 'X-ScaleSetMaxCapacity must be a non-negative integer');
      session.maxCapacity = Number(capacity);
    }
    const lastRaw = req.query.get('lastMessageId');
    if (lastRaw !== null && !/^\d+$/.test(lastRaw)) return exception(400, 'ArgumentException', 'lastMessageId must be a non-negative integer');
    const last = lastRaw === null ? 0 : Number(lastRaw);
    session.lastPoll = host.now();
    // The client names the last message it has: those up to it are its own to delete; the
    // oldest after it that was not deleted is delivered again.
    session.unacked = session.unacked.filter((m) => m.id > last);
    const ready = () => next(s, session);
    s.peakPolls = Math.max(s.peakPolls, s.polls + 1);
    const now = ready();
    if (now) return now;
    session.polling++;
    s.polls++;
    return new Promise<HttpAnswer>((resolve) => {
      let ended = false;
      const done = (closed: boolean) => {
        if (ended) return;
        ended = true;
        clearTimeout(timer);
        session.wake.delete(wake);
        req.closed?.removeEventListener('abort', gone);
        session.polling--;
        s.polls--;
        // Nobody reads this answer: no message is made of the pending events (nor logged as
        // delivered), and the session's idle clock runs from the poll's start, its owner's last word.
        if (closed) return resolve({ status: 202 });
        session.lastPoll = host.now();
        resolve(s.session === session ? (ready() ?? { status: 202 }) : exception(404, 'TaskAgentSessionExpiredException', `session ${sessionId} not found`));
      };
      const wake = () => setImmediate(() => done(false));
      const timer = setTimeout(() => done(false), longPollMs);
      session.wake.add(wake);
      // A client that gave up (its poll window ended) polls no longer: the poll ends with it
      // rather than being counted beside the next holder's.
      const gone = () => done(true);
      req.closed?.addEventListener('abort', gone);
    });
  }

  /** The message to deliver now: the oldest not deleted, else a new one of the pending events. */
  function next(s: ScaleSetState, session: Session): HttpAnswer | undefined {
    let message = session.unacked[0];
    const redelivery = message?.delivered === true;
    if (!message && session.pending.length > 0) {
      message = { id: s.nextMessageId++, events: session.pending, statistics: statistics(s), delivered: false };
      session.pending = [];
      session.unacked.push(message);
    }
    if (!message) return undefined;
    message.delivered = true;
    delivered.push({ scaleSetId: s.id, messageId: message.id, redelivery });
    return { status: 200, body: { messageId: message.id, messageType: MESSAGE_TYPE, body: JSON.stringify(message.events), statistics: message.statistics } };
  }

  const live = (id: number) => {
    const s = scaleSets.get(id);
    if (!s) throw new Error(`no scale set ${id}`);
    return s;
  };

  return {
    route,
    registrationToken(scope) {
      const token = randomToken('', 22).toUpperCase().replace(/[^A-Z0-9]/g, 'A');
      const expiresAt = host.now() + 3600_000;
      registrationTokens.set(token, { scope, expiresAt });
      return { status: 201, body: { token, expires_at: new Date(expiresAt).toISOString().replace(/\.\d+Z$/, 'Z') } };
    },
    jobsChanged() {
      settle();
      for (const s of scaleSets.values()) for (const wake of s.session?.wake ?? []) wake();
    },
    isAssigned: (jobId) => assignment.has(jobId) && scaleSets.has(assignment.get(jobId)!),
    jobFor(scaleSetId, waiting) {
      return waiting.filter((j) => j.status === 'queued' && assignment.get(j.id) === scaleSetId).sort((a, b) => a.id - b.id)[0];
    },
    jobStarted(job, runner) {
      const s = scaleSets.get(assignment.get(job.id) ?? -1);
      if (s) emit(s, { messageType: 'JobStarted', ...jobFields(job), runnerId: runner.id, runnerName: runner.name, runnerAssignTime: new Date(host.now()).toISOString() });
    },
    jobCompleted(job, runner, result) {
      const s = scaleSets.get(assignment.get(job.id) ?? -1);
      if (s) emit(s, { messageType: 'JobCompleted', ...jobFields(job), runnerId: runner.id, runnerName: runner.name, result, finishTime: new Date(host.now()).toISOString() });
    },
    hooks: {
      list: () =>
        [...scaleSets.values()].map((s) => ({
          id: s.id,
          scope: s.scope,
          name: s.name,
          runnerGroupId: s.runnerGroupId,
          labels: [...s.labels],
          ...(s.session ? { session: { id: s.session.id, owner: s.session.owner, ...(s.session.maxCapacity === undefined ? {} : { maxCapacity: s.session.maxCapacity }) } } : {}),
          assignedJobs: [...s.assigned],
        })),
      assignedTo: (jobId) => assignment.get(jobId),
      delivered: () => delivered.map((d) => ({ ...d })),
      expireSession: (id) => endSession(live(id), 'expired'),
      expireQueueToken(id) {
        const session = live(id).session;
        if (session) session.tokenExpiresAt = 0;
      },
      dropNextAck(id, when, count = 1) {
        const session = live(id).session;
        if (!session) throw new Error(`scale set ${id} has no session`);
        session.dropAck = { when, left: count };
      },
      peakPolls: (id) => live(id).peakPolls,
      polls: (id) => scaleSets.get(id)?.polls ?? 0,
      runnersRegistered: (id) => jitConfigs.get(id) ?? 0,
      holdSession(id, owner) {
        const s = live(id);
        if (s.session) throw new Error(`scale set ${id} already has a session`);
        newSession(s, owner);
      },
      sessions: () => sessionLog.map((r) => ({ ...r })),
    },
  };
}
