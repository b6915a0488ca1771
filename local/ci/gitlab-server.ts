import { randomUUID } from 'node:crypto';
import { gitlabJobPending, gitlabJobRunning } from '../deliveries';
import { gitlabJobFor } from './assign';
import { checkGitLabQuery, GITLAB_RUNNER_TYPES } from './gitlab-bounds';
import { authorizationCredential, rateLimitHeaders, jsonObject, linkHeader, randomToken, startJsonServer, type HttpAnswer, type HttpRequest } from './http';
import { byId, checkedLabels, serverBasics, type LocalJobContainers, type LocalJobOptions, type LoggedRequest, type LoopbackServerOptions, type LoopbackWebhook } from './server-basics';

/**
 * A loopback GitLab for `npm run local`: the REST API v4 routes the project's GitLab provider
 * calls (lambdas/ci/gitlab.ts), authenticated with a `PRIVATE-TOKEN`, and the runner API the
 * fake `local/runner/gitlab-runner run-single` speaks (`POST /jobs/request`, `PUT /jobs/:id`,
 * `PATCH /jobs/:id/trace` with its `Content-Range`), authenticated with the runner
 * authentication token and the job token as GitLab does (lib/api/ci/runner.rb).
 *
 * Behaviour as GitLab's: a runner takes the OLDEST pending job whose tags are all among its
 * own (an untagged job only when it runs untagged jobs); a runner is NOT removed when
 * run-single exits: it stays registered until `DELETE /runners/:id` (docs/gitlab.md).
 *
 * For the reconciler: the fleet's webhook and its event log (`GET .../hooks/:hook_id`,
 * `GET .../hooks/:hook_id/events`, `POST .../events/:id/resend`, doc/api/project_webhooks.md and
 * group_webhooks.md; 5 resends a minute per hook and user, then 429), pending jobs per project
 * (`GET /projects/:id/jobs?scope[]=pending`, newest first), a group's projects, `x-next-page`
 * and `Link` paging, and gitlab.com's `RateLimit-*` headers on every authenticated answer.
 *
 * Every authenticated request's query is checked against GitLab's documented bounds
 * (gitlab-bounds.ts) before it is routed, as Grape validates after authentication: what GitLab
 * refuses (a hook event page of more than 20) is refused with its 400, what it corrects (a
 * `per_page` above 100 elsewhere) is served corrected.
 */
export interface GitLabJob {
  id: number;
  projectId: number;
  tags: string[];
  /** `canceling`: cancelled while a runner ran it (GitLab 17.0+); the runner still works on it until it reports. */
  status: 'pending' | 'running' | 'canceling' | 'success' | 'failed' | 'canceled';
  runnerId?: number;
  /** The scope of the runner that took it (`group_type:12`, `project_type:7`, `instance_type`): it outlives the runner's deletion. */
  runnerScope?: string;
  /** GitLab's `created_at` and `started_at` (ISO): how long the job waited for a runner. */
  createdAt?: string;
  startedAt?: string;
}

export interface GitLabRunnerRecord {
  id: number;
  description: string;
  tagList: string[];
  runUntagged: boolean;
  runnerType: string;
  groupId?: number;
  /** A `project_type` runner's project: it takes only that project's jobs. */
  projectId?: number;
  token: string;
  contactedAt?: string;
  /** `PUT /runners/:id` with `paused`: a paused runner is handed no new job. */
  paused: boolean;
}

export interface LoopbackGitLab {
  /** Base URL (FleetConfig gitlab.url); the API is at /api/v4. */
  readonly url: string;
  /** The personal/group access token to put in SSM. */
  readonly accessToken: string;
  /**
   * A pending job. With `options.script` its script step is that bash script, which the fake
   * runner runs as the job (local/runner/gitlab-runner) instead of only waiting its seconds.
   */
  addJob(projectId: number, tags: string[], options?: LocalJobOptions): GitLabJob;
  jobs(): GitLabJob[];
  /**
   * Cancels a job (`POST /projects/:id/jobs/:job_id/cancel`'s effect): a pending job ends
   * `canceled`, no runner takes it; a running one goes `canceling` (GitLab 17.0+), its runner
   * still working on it until it reports its end (`PUT /jobs/:id`), which makes it `canceled`.
   */
  cancelJob(jobId: number): void;
  runners(): GitLabRunnerRecord[];
  /** Jobs whose runner was deleted (`DELETE /runners/:id`) while it ran them: cut off. */
  jobsCutOff(): number[];
  /**
   * The next `times` (default 1) requests matching answer `status` before any routing or auth;
   * a 429 carries `retry-after: 1`, as GitLab's rate limit answers do.
   */
  failNext(match: { method: string; path: RegExp }, status: number, times?: number): void;
  /**
   * The webhook's event log gains a pending Job Hook of the job, answered with `status` (0: GitLab
   * got no HTTP answer, logged as "internal error"); returns the delivery's Idempotency-Key.
   */
  recordHookEvent(jobId: number, status: number): string;
  /** The webhook's event log, newest first, as the events list shows it. */
  hookEvents(): GitLabHookEvent[];
  /** The hook's state as `GET .../hooks/:hook_id` shows it (GitLab pauses and disables failing hooks). */
  setHookState(alertStatus: 'executable' | 'temporarily_disabled' | 'disabled', disabledUntil?: string): void;
  /** What `RateLimit-Remaining` says next (it counts down with each authenticated request). */
  setRateLimitRemaining(remaining: number): void;
  /** Authenticated REST requests served (after faults), in order: the reconciler's budget is counted from these. */
  requests(): LoggedRequest[];
  /**
   * The fleet's webhook (its URL and secret token): from now on each job a runner takes is
   * announced to it by a Job Hook with `build_status: running`, as GitLab sends one per status.
   */
  setWebhook(webhook: LoopbackWebhook): void;
  /** Resolves once every Job Hook sent to the webhook so far has been answered. */
  hooksSettled(): Promise<void>;
  close(): Promise<void>;
}

/** One entry of a webhook's event log, in GitLab's wire format (`response_status` is a string). */
export interface GitLabHookEvent {
  readonly id: number;
  readonly url: string;
  readonly trigger: string;
  readonly request_headers: Record<string, string>;
  readonly request_data: Record<string, unknown>;
  readonly response_headers: Record<string, string>;
  readonly response_body: string;
  readonly execution_duration: number;
  readonly response_status: string;
}

/** The fleet's webhook at the loopback GitLab: a project's or a group's. */
export interface LoopbackGitLabHook {
  readonly owner: 'project' | 'group';
  readonly ownerId: number;
  readonly hookId: number;
}

/** A further group the access token administers, with its projects. */
export interface LoopbackGitLabGroup {
  readonly id: number;
  readonly projectIds: readonly number[];
}

/** `jobSeconds` is sent as the job's LOCAL_JOB_SECONDS variable. */
export interface LoopbackGitLabOptions extends LoopbackServerOptions {
  /** The group the access token administers; group runners must name it (or one of `groups`). */
  readonly groupId: number;
  /**
   * More groups the token administers (Owner), each with its projects: a project not listed in
   * any is `groupId`'s. A group runner takes only its group's projects' jobs, as GitLab's do.
   */
  readonly groups?: readonly LoopbackGitLabGroup[];
  /**
   * Groups and projects that exist but that the token cannot manage: creating a runner there, or
   * listing their runners, is 403 (GitLab's answer to a member without the role; an unknown or
   * invisible one is 404).
   */
  readonly forbidden?: { readonly groupIds?: readonly number[]; readonly projectIds?: readonly number[] };
  /** The fleet's webhook (default: hook 1 of the group). */
  readonly hook?: LoopbackGitLabHook;
  /** Further webhooks (of the other groups or projects); a job's hook event goes to its project's, else its group's, else `hook`. */
  readonly moreHooks?: readonly LoopbackGitLabHook[];
  /**
   * Sends a resend (`POST .../events/:id/resend`) of a logged pending Job Hook: the stored
   * payload with its Idempotency-Key; resolves to the webhook's HTTP status (0: no answer).
   * Without it, a resend fails to connect.
   */
  readonly resend?: (event: { readonly idempotencyKey: string; readonly job: GitLabJob; readonly projectPath: string }) => Promise<number>;
  /** Projects of the group besides those holding jobs (`GET /groups/:id/projects`). */
  readonly projectIds?: readonly number[];
  /** Authenticated requests a minute (`RateLimit-Limit`; default 2000, gitlab.com's). */
  readonly rateLimit?: number;
  /**
   * The runner listings show a runner that holds a running job as `offline` (`online: false`),
   * the idle reading of the fleet's GitLab provider, as GitLab shows a runner whose contact
   * (`contacted_at`) is older than its online window; `DELETE /runners/:id` is accepted as
   * GitLab always does (it has no "runner busy" refusal, unlike GitHub's 422), which cuts the
   * job off: see `deleteRunner`. `GET /runners/:id/jobs?status=running` still tells the truth.
   */
  readonly offlineMidJob?: boolean;
}

/** GitLab allows 5 resends a minute per hook and user (doc/api/project_webhooks.md). */
const RESENDS_PER_MINUTE = 5;

const RUNNER_TYPES = new Set<string>(GITLAB_RUNNER_TYPES);
/** GitLab shows a runner online while it contacted the server within the last 2 hours. */
const ONLINE_WINDOW_MS = 2 * 60 * 60_000;
const JOB_TIMEOUT_S = 3600;

interface RunnerState extends GitLabRunnerRecord {
  readonly projectId?: number;
  readonly createdAt: string;
}

interface JobState extends GitLabJob {
  readonly pipelineId: number;
  readonly script?: string;
  readonly containers?: LocalJobContainers;
  readonly token: string;
  readonly createdAt: string;
  startedAt?: string;
  finishedAt?: string;
  trace: string;
}

export async function startLoopbackGitLab(opts: LoopbackGitLabOptions): Promise<LoopbackGitLab> {
  if (!Number.isSafeInteger(opts.groupId) || opts.groupId < 1) throw new Error(`groupId ${opts.groupId} is not a GitLab group id`);
  const basics = serverBasics<LoggedRequest>(opts);
  const jobSeconds = basics.jobSeconds;
  const accessToken = randomToken('glpat-', 15);
  const runners = new Map<number, RunnerState>();
  const jobs = new Map<number, JobState>();
  let nextRunnerId = 101;
  let nextJobId = 7001;
  let nextPipelineId = 501;
  let base = '';
  const iso = () => new Date().toISOString();
  const hook: LoopbackGitLabHook = opts.hook ?? { owner: 'group', ownerId: opts.groupId, hookId: 1 };
  const allHooks = [hook, ...(opts.moreHooks ?? [])];
  const hookKey = (h: LoopbackGitLabHook) => `${h.owner}:${h.ownerId}:${h.hookId}`;
  const hookState = { alertStatus: 'executable', disabledUntil: null as string | null };
  const hookEvents: (GitLabHookEvent & { jobId: number; hook: string })[] = [];
  const resendTimes = new Map<string, number[]>();
  const groupOfProject = new Map<number, number>();
  for (const g of opts.groups ?? []) for (const id of g.projectIds) groupOfProject.set(id, g.id);
  const managedGroups = new Set([opts.groupId, ...(opts.groups ?? []).map((g) => g.id)]);
  const forbiddenGroups = new Set(opts.forbidden?.groupIds ?? []);
  const forbiddenProjects = new Set(opts.forbidden?.projectIds ?? []);
  const groupOf = (projectId: number) => groupOfProject.get(projectId) ?? opts.groupId;
  /** The hook a job's events go to: its project's, else its group's, else the fleet's first. */
  const hookOfProject = (projectId: number) =>
    allHooks.find((h) => h.owner === 'project' && h.ownerId === projectId) ?? allHooks.find((h) => h.owner === 'group' && h.ownerId === groupOf(projectId)) ?? hook;
  let nextHookEventId = 1;
  const rateLimit = opts.rateLimit ?? 2000;
  const cutOff = new Set<number>();
  let rateRemaining = rateLimit;

  const unauthorized: HttpAnswer = { status: 401, body: { message: '401 Unauthorized' } };
  const forbidden: HttpAnswer = { status: 403, body: { message: '403 Forbidden' } };
  const notFound = (what = ''): HttpAnswer => ({ status: 404, body: { message: `404 ${what ? `${what} ` : ''}Not Found` } });
  const badRequest = (message: string): HttpAnswer => ({ status: 400, body: { message: `400 Bad request - ${message}` } });

  /** The runner's `status` (api/runners.md): `online`, `offline`, `stale` or `never_contacted`. */
  function status(r: RunnerState): string {
    if (r.contactedAt === undefined) return 'never_contacted';
    if (opts.offlineMidJob && runningJobsOf(r.id).length > 0) return 'offline';
    return Date.now() - Date.parse(r.contactedAt) < ONLINE_WINDOW_MS ? 'online' : 'offline';
  }

  function runnerJson(r: RunnerState): Record<string, unknown> {
    return {
      id: r.id,
      description: r.description,
      ip_address: null,
      active: !r.paused,
      paused: r.paused,
      is_shared: r.runnerType === 'instance_type',
      runner_type: r.runnerType,
      name: r.contactedAt === undefined ? null : 'gitlab-runner',
      online: status(r) === 'online',
      status: status(r),
    };
  }

  function jobJson(j: JobState): Record<string, unknown> {
    const runner = j.runnerId === undefined ? undefined : runners.get(j.runnerId);
    return {
      id: j.id,
      status: j.status,
      stage: 'test',
      name: `job-${j.id}`,
      ref: 'main',
      tag: false,
      tag_list: [...j.tags],
      created_at: j.createdAt,
      started_at: j.startedAt ?? null,
      finished_at: j.finishedAt ?? null,
      duration: j.startedAt && j.finishedAt ? (Date.parse(j.finishedAt) - Date.parse(j.startedAt)) / 1000 : null,
      pipeline: { id: j.pipelineId, project_id: j.projectId, ref: 'main', status: j.status },
      runner: runner ? runnerJson(runner) : null,
      web_url: `${base}/${projectPath(j.projectId)}/-/jobs/${j.id}`,
    };
  }

  /** The REST API's credential: `PRIVATE-TOKEN`, or an OAuth-style bearer. */
  function apiAuthorized(req: HttpRequest): boolean {
    const header = req.headers['private-token'];
    const token = typeof header === 'string' ? header : authorizationCredential(req.headers);
    return token === accessToken;
  }

  function route(req: HttpRequest): HttpAnswer | Promise<HttpAnswer> {
    const fault = basics.faults.take(req.method, req.path);
    if (fault !== undefined) return { status: fault, headers: rateLimitHeaders(fault), body: { message: fault === 429 ? 'Retry later' : `${fault} Injected fault` } };
    if (!req.path.startsWith('/api/v4/')) return notFound();
    const path = req.path.slice('/api/v4'.length);
    // The runner API authenticates with tokens in the request, not with PRIVATE-TOKEN.
    if (path === '/jobs/request' || /^\/jobs\/\d+(\/trace)?$/.test(path) || path === '/runners/verify' || (path === '/runners' && req.method === 'DELETE')) return runnerApi(req, path);
    if (!apiAuthorized(req)) return unauthorized;
    basics.log({ method: req.method, path });
    rateRemaining = Math.max(0, rateRemaining - 1);
    // Grape validates the parameters after authentication, before the endpoint runs.
    const checked = checkGitLabQuery(req.method, path, req.query);
    if ('refusal' in checked) return withRateLimit(checked.refusal);
    const answer = restApi(req, path);
    return answer instanceof Promise ? answer.then(withRateLimit) : withRateLimit(answer);
  }

  /** gitlab.com's rate-limit headers (doc/user/gitlab_com/index.md, "Rate limits"), a minute's window. */
  function withRateLimit(answer: HttpAnswer): HttpAnswer {
    const reset = Math.ceil(Date.now() / 60_000) * 60;
    return {
      ...answer,
      headers: {
        ...answer.headers,
        'ratelimit-limit': String(rateLimit),
        'ratelimit-observed': String(rateLimit - rateRemaining),
        'ratelimit-remaining': String(rateRemaining),
        'ratelimit-reset': String(reset),
        'ratelimit-resettime': new Date(reset * 1000).toUTCString(),
      },
    };
  }

  function restApi(req: HttpRequest, path: string): HttpAnswer | Promise<HttpAnswer> {
    const hookAnswer = hookApi(req, path);
    if (hookAnswer !== undefined) return hookAnswer;
    if (path === '/user/runners' && req.method === 'POST') return createRunner(req.body);
    let m: RegExpExecArray | null;
    if ((m = /^\/runners\/(\d+)$/.exec(path)) && req.method === 'DELETE') return deleteRunner(Number(m[1]));
    if ((m = /^\/runners\/(\d+)\/jobs$/.exec(path)) && req.method === 'GET') return runnerJobs(req, Number(m[1]));
    if ((m = /^\/runners\/(\d+)$/.exec(path)) && req.method === 'PUT') return updateRunner(req.body, Number(m[1]));
    if ((m = /^\/runners\/(\d+)$/.exec(path)) && req.method === 'GET') {
      const r = runners.get(Number(m[1]));
      return r ? { status: 200, body: { ...runnerJson(r), tag_list: [...r.tagList], run_untagged: r.runUntagged, locked: r.runnerType === 'project_type', contacted_at: r.contactedAt ?? null } } : notFound('Runner');
    }
    if ((m = /^\/(?:runners(\/all)?|groups\/(\d+)\/runners|projects\/(\d+)\/runners)$/.exec(path)) && req.method === 'GET') {
      const owned = path === '/runners';
      if (m[2] !== undefined && !managedGroups.has(Number(m[2]))) return forbiddenGroups.has(Number(m[2])) ? forbidden : notFound('Group');
      if (m[3] !== undefined && forbiddenProjects.has(Number(m[3]))) return forbidden;
      const type = req.query.get('type');
      // What each list shows (api/runners.md): the user's own (group and project runners of the
      // groups and projects it maintains: the token's user maintains all of them here); every
      // runner; the group's and instance runners; the project's, its group's and instance runners.
      const visible = [...runners.values()].filter((r) => {
        if (owned) return r.runnerType !== 'instance_type';
        if (m![2] !== undefined) return r.runnerType === 'instance_type' || r.groupId === Number(m![2]);
        if (m![3] !== undefined) return r.runnerType === 'instance_type' || r.groupId === groupOf(Number(m![3])) || r.projectId === Number(m![3]);
        return true;
      });
      const all = visible.filter((r) => type === null || r.runnerType === type).sort((a, b) => a.id - b.id);
      return paged(req, all.map(runnerJson));
    }
    if ((m = /^\/projects\/(\d+)\/jobs$/.exec(path)) && req.method === 'GET') {
      // `scope[]=pending` (or `scope=pending`): the project's jobs in those states, newest first.
      const scopes = [...req.query.getAll('scope[]'), ...req.query.getAll('scope')];
      const projectId = Number(m[1]);
      const all = [...jobs.values()].filter((j) => j.projectId === projectId && (scopes.length === 0 || scopes.includes(j.status))).sort((a, b) => b.id - a.id);
      return paged(req, all.map(jobJson));
    }
    if ((m = /^\/groups\/(\d+)\/projects$/.exec(path)) && req.method === 'GET') {
      const groupId = Number(m[1]);
      if (!managedGroups.has(groupId)) return forbiddenGroups.has(groupId) ? forbidden : notFound('Group');
      const ids = [...new Set([...(opts.projectIds ?? []), ...groupOfProject.keys(), ...[...jobs.values()].map((j) => j.projectId)])].filter((id) => groupOf(id) === groupId).sort((a, b) => a - b);
      return paged(req, ids.map((id) => ({ id, name: `project-${id}`, path: `project-${id}`, path_with_namespace: projectPath(id), web_url: `${base}/${projectPath(id)}` })));
    }
    if ((m = /^\/projects\/(\d+)\/jobs\/(\d+)$/.exec(path)) && req.method === 'GET') {
      const job = jobs.get(Number(m[2]));
      return job && job.projectId === Number(m[1]) ? { status: 200, body: jobJson(job) } : notFound();
    }
    return notFound();
  }

  /** Jobs the runner works on: `running`, and `canceling` (its `after_script` still runs). */
  function runningJobsOf(runnerId: number): JobState[] {
    return [...jobs.values()].filter((j) => j.runnerId === runnerId && (j.status === 'running' || j.status === 'canceling'));
  }

  /**
   * `PUT /runners/:id` (api/runners.md, "Update runner's details"): here only `paused` (and the
   * `active` it replaced in 14.8, its negation), as JSON or form values; answers the runner.
   */
  function updateRunner(body: string, id: number): HttpAnswer {
    const r = runners.get(id);
    if (!r) return notFound('Runner');
    const b = jsonObject(body) ?? Object.fromEntries(new URLSearchParams(body));
    const flag = (v: unknown) => (typeof v === 'boolean' ? v : v === 'true' ? true : v === 'false' ? false : undefined);
    const paused = b.paused !== undefined ? flag(b.paused) : b.active !== undefined ? (flag(b.active) === undefined ? undefined : !flag(b.active)) : undefined;
    if (paused === undefined) return badRequest('paused is missing or invalid');
    r.paused = paused;
    return { status: 200, body: runnerJson(r) };
  }

  /**
   * `DELETE /runners/:id` (api/runners.md#delete-a-runner): accepted whatever the runner is
   * doing. A job it was running stays `running` with no runner to finish it: GitLab drops such a
   * job only when it has not been updated for an hour (`Ci::StuckBuilds::DropRunningService`,
   * `stuck_or_timeout_failure`), which this server does not run; `cutOff` names those jobs.
   */
  function deleteRunner(id: number): HttpAnswer {
    if (!runners.has(id)) return notFound('Runner');
    for (const j of runningJobsOf(id)) cutOff.add(j.id);
    runners.delete(id);
    return { status: 204 };
  }

  /**
   * `GET /runners/:id/jobs` (api/runners.md#list-jobs-processed-by-a-runner): the jobs the runner
   * is processing or processed, newest first. The page names `status` running, success, failed or
   * canceled; lib/api/ci/runners.rb accepts any job status (`Ci::Build::AVAILABLE_STATUSES`), 400 else
   * (gitlab-bounds.ts, checked before routing).
   */
  function runnerJobs(req: HttpRequest, id: number): HttpAnswer {
    if (!runners.has(id)) return notFound('Runner');
    const wanted = req.query.get('status');
    const all = [...jobs.values()].filter((j) => j.runnerId === id && (wanted === null || j.status === wanted)).sort((a, b) => b.id - a.id);
    return paged(req, all.map(jobJson));
  }

  function projectPath(projectId: number): string {
    return `group-${groupOf(projectId)}/project-${projectId}`;
  }

  /**
   * A page of a list with GitLab's offset paging headers (doc/api/rest/_index.md, "Pagination"),
   * the page and its size as GitLab reads the request (gitlab-bounds.ts: above 100 is 100).
   */
  function paged(req: HttpRequest, all: readonly unknown[]): HttpAnswer {
    const window = checkGitLabQuery(req.method, req.path.slice('/api/v4'.length), req.query);
    const { page, perPage } = 'refusal' in window ? { page: 1, perPage: 20 } : window;
    const totalPages = Math.max(1, Math.ceil(all.length / perPage));
    return {
      status: 200,
      headers: {
        'x-page': String(page),
        'x-per-page': String(perPage),
        'x-next-page': page < totalPages ? String(page + 1) : '',
        'x-prev-page': page > 1 ? String(page - 1) : '',
        'x-total': String(all.length),
        'x-total-pages': String(totalPages),
        link: linkHeader('gitlab', base, req.path, req.query, page, totalPages),
      },
      body: all.slice((page - 1) * perPage, page * perPage),
    };
  }

  /** The webhook routes; undefined when the path is not one of them. */
  function hookApi(req: HttpRequest, path: string): HttpAnswer | Promise<HttpAnswer> | undefined {
    const m = /^\/(projects|groups)\/(\d+)\/hooks\/(\d+)(\/events(?:\/(\d+)\/resend)?)?$/.exec(path);
    if (!m) return undefined;
    const ours = allHooks.find((h) => m[1] === `${h.owner}s` && Number(m[2]) === h.ownerId && Number(m[3]) === h.hookId);
    if (!ours) return notFound('Hook');
    if (m[4] === undefined && req.method === 'GET') {
      return {
        status: 200,
        body: { id: ours.hookId, url: `${base}/webhook`, [`${ours.owner}_id`]: ours.ownerId, job_events: true, alert_status: hookState.alertStatus, disabled_until: hookState.disabledUntil, created_at: iso() },
      };
    }
    if (m[5] === undefined && req.method === 'GET') {
      const status = req.query.get('status');
      const listed = [...hookEvents].sort((a, b) => b.id - a.id).filter((e) => e.hook === hookKey(ours) && (status === null || statusMatches(e.response_status, status)));
      return paged(req, listed.map(({ jobId: _jobId, hook: _hook, ...e }) => e));
    }
    if (m[5] !== undefined && req.method === 'POST') return resendHookEvent(ours, Number(m[5]));
    return notFound();
  }

  async function resendHookEvent(of: LoopbackGitLabHook, id: number): Promise<HttpAnswer> {
    const original = hookEvents.find((e) => e.id === id && e.hook === hookKey(of));
    if (!original) return notFound('Hook event');
    const now = Date.now();
    // GitLab's limit is per hook (and user).
    const times = resendTimes.get(hookKey(of)) ?? [];
    resendTimes.set(hookKey(of), times);
    while (times.length > 0 && times[0]! <= now - 60_000) times.shift();
    if (times.length >= RESENDS_PER_MINUTE) return { status: 429, headers: { 'retry-after': '60' }, body: { message: 'This endpoint has been requested too many times. Try again later.' } };
    times.push(now);
    const job = jobs.get(original.jobId);
    const key = original.request_headers['Idempotency-Key']!;
    const status = job && opts.resend ? await opts.resend({ idempotencyKey: key, job: publicJob(job), projectPath: projectPath(job.projectId) }) : 0;
    // A resend is logged as an attempt of its own, with the original's Idempotency-Key.
    logHookEvent(original.jobId, status, key);
    return { status: 201, body: { response_status: status === 0 ? 'internal error' : status } };
  }

  function logHookEvent(jobId: number, status: number, idempotencyKey: string): void {
    const job = jobs.get(jobId);
    if (!job) throw new Error(`job ${jobId} is not known`);
    const delivery = gitlabJobPending({ buildId: job.id, projectId: job.projectId, projectPath: projectPath(job.projectId) }, '[REDACTED]', idempotencyKey);
    hookEvents.push({
      id: nextHookEventId++,
      jobId,
      hook: hookKey(hookOfProject(job.projectId)),
      url: `${base}/webhook`,
      trigger: 'job_hooks',
      request_headers: { 'Content-Type': 'application/json', 'User-Agent': 'GitLab/18.6.0', 'Idempotency-Key': idempotencyKey, 'X-Gitlab-Event': 'Job Hook', 'X-Gitlab-Token': '[REDACTED]' },
      request_data: JSON.parse(delivery.body) as Record<string, unknown>,
      response_headers: status === 0 ? {} : { 'Content-Type': 'application/json' },
      response_body: status === 0 ? 'Connection refused' : '',
      execution_duration: 0.1,
      response_status: status === 0 ? 'internal error' : String(status),
    });
  }

  /** `POST /user/runners` (api/users.md#create-a-runner-linked-to-a-user). */
  function createRunner(body: string): HttpAnswer {
    const b = jsonObject(body);
    if (!b) return badRequest('the body is not JSON');
    if (typeof b.runner_type !== 'string' || !RUNNER_TYPES.has(b.runner_type)) return { status: 400, body: { error: 'runner_type does not have a valid value' } };
    let groupId: number | undefined;
    let projectId: number | undefined;
    if (b.runner_type === 'group_type') {
      if (b.group_id === undefined) return badRequest('group_id is missing');
      // lib/api/user_runners.rb: 403 without the Owner role of the group (one that exists); a
      // missing one fails the runner creation service's check, answered 400 "Missing/invalid group".
      if (!managedGroups.has(Number(b.group_id))) return forbiddenGroups.has(Number(b.group_id)) ? forbidden : badRequest('Missing/invalid group');
      groupId = Number(b.group_id);
    }
    if (b.runner_type === 'project_type') {
      if (b.project_id === undefined) return badRequest('project_id is missing');
      projectId = Number(b.project_id);
      if (!Number.isSafeInteger(projectId) || projectId < 1) return badRequest('Missing/invalid project');
      if (forbiddenProjects.has(projectId)) return forbidden;
    }
    const rawTags = b.tag_list ?? [];
    const tags = typeof rawTags === 'string' ? rawTags.split(',') : Array.isArray(rawTags) && rawTags.every((t) => typeof t === 'string') ? (rawTags as string[]) : undefined;
    if (!tags) return { status: 400, body: { error: 'tag_list is invalid' } };
    const tagList = [...new Set(tags.map((t) => t.trim()).filter((t) => t !== ''))];
    if (b.run_untagged !== undefined && typeof b.run_untagged !== 'boolean') return { status: 400, body: { error: 'run_untagged is invalid' } };
    const runUntagged = b.run_untagged ?? true;
    if (!runUntagged && tagList.length === 0) return { status: 400, body: { message: { tags_list: ['can not be empty when runner is not allowed to pick untagged jobs'] } } };
    if (b.description !== undefined && typeof b.description !== 'string') return { status: 400, body: { error: 'description is invalid' } };
    const runner: RunnerState = {
      id: nextRunnerId++,
      description: (b.description as string | undefined) ?? '',
      tagList,
      runUntagged,
      runnerType: b.runner_type,
      ...(groupId === undefined ? {} : { groupId }),
      ...(projectId === undefined ? {} : { projectId }),
      token: randomToken('glrt-', 15),
      createdAt: iso(),
      paused: false,
    };
    runners.set(runner.id, runner);
    return { status: 201, body: { id: runner.id, token: runner.token, token_expires_at: null } };
  }

  function runnerByToken(token: unknown): RunnerState | undefined {
    return typeof token === 'string' && token !== '' ? [...runners.values()].find((r) => r.token === token) : undefined;
  }

  function jobRequestAnswer(j: JobState): Record<string, unknown> {
    return {
      id: j.id,
      token: j.token,
      allow_git_fetch: true,
      job_info: { id: j.id, name: `job-${j.id}`, stage: 'test', project_id: j.projectId, project_name: `project-${j.projectId}`, time_in_queue_seconds: 0 },
      git_info: { repo_url: `${base}/group-${opts.groupId}/project-${j.projectId}.git`, ref: 'main', sha: '0'.repeat(40), before_sha: '0'.repeat(40), ref_type: 'branch', refspecs: [], depth: 20 },
      runner_info: { timeout: JOB_TIMEOUT_S },
      variables: [
        { key: 'CI_JOB_ID', value: String(j.id), public: true, masked: false },
        { key: 'CI_PROJECT_ID', value: String(j.projectId), public: true, masked: false },
        // The fake runner works this long instead of running the script, unless told to run it.
        { key: 'LOCAL_JOB_SECONDS', value: String(jobSeconds), public: true, masked: false },
        ...(j.script === undefined ? [] : [{ key: 'LOCAL_RUN_SCRIPT', value: 'true', public: true, masked: false }]),
      ],
      steps: [{ name: 'script', script: [j.script ?? `sleep ${jobSeconds}`], timeout: JOB_TIMEOUT_S, when: 'on_success', allow_failure: false }],
      // GitLab's job payload: the job's `image:` and `services:` (name, alias, command).
      image: j.containers ? { name: j.containers.image } : null,
      services: (j.containers?.services ?? []).map((s) => ({ name: s.image, alias: s.alias, command: s.command ?? [] })),
      artifacts: [],
      cache: [],
      credentials: [],
      dependencies: [],
      features: { trace_sections: true, failure_reasons: ['script_failure', 'runner_system_failure'] },
    };
  }

  /** GitLab's Job Hook with `build_status: running` for a job the runner took. */
  function announceStart(job: JobState, r: RunnerState): void {
    const fields = { buildId: job.id, projectId: job.projectId, projectPath: projectPath(job.projectId), createdAt: job.createdAt, startedAt: job.startedAt ?? iso() };
    const runner = { runnerId: r.id, runnerName: r.description, runnerType: r.runnerType, runnerTags: r.tagList };
    basics.sendHook((token) => gitlabJobRunning({ ...fields, ...runner }, token));
  }

  function runnerApi(req: HttpRequest, path: string): HttpAnswer {
    const b = jsonObject(req.body) ?? {};
    if (path === '/runners/verify' && req.method === 'POST') {
      const r = runnerByToken(b.token);
      return r ? { status: 200, body: { id: r.id, token: r.token, token_expires_at: null } } : forbidden;
    }
    if (path === '/runners' && req.method === 'DELETE') {
      const r = runnerByToken(b.token);
      if (!r) return forbidden;
      runners.delete(r.id);
      return { status: 204 };
    }
    if (path === '/jobs/request' && req.method === 'POST') {
      const r = runnerByToken(b.token);
      if (!r) return forbidden;
      // A runner that died before this request: it never arrived, so it is no contact either.
      if (basics.strays.dies(r.description)) return { status: 204, headers: { 'x-gitlab-last-update': String(jobs.size) } };
      r.contactedAt = iso();
      // A paused runner still polls (and counts as a contact) but is handed no job.
      if (r.paused) return { status: 204, headers: { 'x-gitlab-last-update': String(jobs.size) } };
      // A group runner takes only its group's projects' jobs.
      const job = basics.strays.jobFor(r.description, [...jobs.values()], (waiting) => gitlabJobFor(r, [...waiting].filter((j) => r.groupId === undefined || groupOf(j.projectId) === r.groupId)));
      if (!job) return { status: 204, headers: { 'x-gitlab-last-update': String(jobs.size) } };
      job.status = 'running';
      job.runnerId = r.id;
      job.runnerScope = r.runnerType === 'instance_type' ? r.runnerType : `${r.runnerType}:${r.groupId ?? r.projectId}`;
      job.startedAt = iso();
      announceStart(job, r);
      return { status: 201, body: jobRequestAnswer(job) };
    }
    const m = /^\/jobs\/(\d+)(\/trace)?$/.exec(path);
    const job = m ? jobs.get(Number(m[1])) : undefined;
    if (m?.[2] !== undefined && req.method === 'PATCH') {
      if (!job) return notFound();
      if (req.headers['job-token'] !== job.token) return forbidden;
      if (job.status !== 'running' && job.status !== 'canceling') return { ...forbidden, headers: { 'job-status': job.status } };
      // GitLab appends a chunk only at the trace's current end: `Content-Range: <start>-<end>`
      // (the end is not checked, runners send it one past the last byte); else 416 names the size.
      const range = req.headers['content-range'];
      if (range === undefined) return { status: 400, body: { message: '400 Missing header Content-Range' } };
      const length = Buffer.byteLength(job.trace);
      if (Number.parseInt(String(range).split('-')[0] ?? '', 10) !== length) return { status: 416, body: { message: '416 Range Not Satisfiable' }, headers: { range: `0-${length}` } };
      job.trace += req.body;
      return { status: 202, headers: { 'job-status': job.status, range: `0-${Buffer.byteLength(job.trace)}` } };
    }
    if (m && m[2] === undefined && req.method === 'PUT') {
      if (!job) return notFound();
      if (b.token !== job.token) return forbidden;
      // GitLab accepts updates only while the job is running (or canceling) on a runner.
      if (job.status !== 'running' && job.status !== 'canceling') return { status: 403, body: { message: '403 Forbidden - Job is not running' }, headers: { 'job-status': job.status } };
      if (b.state === 'running') return { status: 200, headers: { 'job-status': job.status } };
      // Ci::UpdateBuildStateService knows these three; anything else is 400.
      if (b.state !== 'success' && b.state !== 'failed') return badRequest(`state "${String(b.state)}" is not running, success or failed`);
      // A canceling job ends canceled, whatever its after_script did.
      job.status = job.status === 'canceling' ? 'canceled' : b.state;
      job.finishedAt = iso();
      if (job.status !== 'success') return { status: 200, headers: { 'job-status': job.status } };
      const runner = job.runnerId === undefined ? undefined : runners.get(job.runnerId);
      basics.jobDone('gitlab', job.id, runner?.description);
      return { status: 200, headers: { 'job-status': 'success' } };
    }
    return notFound();
  }

  const server = await startJsonServer(route);
  base = server.url;
  return {
    url: server.url,
    accessToken,
    addJob(projectId, tags, options) {
      if (!Number.isSafeInteger(projectId) || projectId < 1) throw new Error(`projectId ${projectId} is not a GitLab project id`);
      const job: JobState = { id: nextJobId++, projectId, tags: checkedLabels(tags, 'tags'), status: 'pending', pipelineId: nextPipelineId++, token: randomToken('glcbt-', 15), createdAt: iso(), trace: '', ...(options?.script === undefined ? {} : { script: options.script }), ...(options?.containers ? { containers: options.containers } : {}) };
      jobs.set(job.id, job);
      return publicJob(job);
    },
    jobs: () => byId(jobs.values(), publicJob),
    cancelJob: (jobId) => cancelPending(jobs.get(jobId), jobId),
    runners: () =>
      byId(runners.values(), (r) => ({
        id: r.id,
        description: r.description,
        tagList: [...r.tagList],
        runUntagged: r.runUntagged,
        runnerType: r.runnerType,
        ...(r.groupId === undefined ? {} : { groupId: r.groupId }),
        ...(r.projectId === undefined ? {} : { projectId: r.projectId }),
        token: r.token,
        ...(r.contactedAt === undefined ? {} : { contactedAt: r.contactedAt }),
        paused: r.paused,
      })),
    jobsCutOff: () => [...cutOff].sort((a, b) => a - b),
    failNext: basics.failNext,
    recordHookEvent(jobId, status) {
      const key = randomUUID();
      logHookEvent(jobId, status, key);
      return key;
    },
    hookEvents: () => [...hookEvents].sort((a, b) => b.id - a.id).map(({ jobId: _jobId, hook: _hook, ...e }) => e),
    setHookState(alertStatus, disabledUntil) {
      hookState.alertStatus = alertStatus;
      hookState.disabledUntil = disabledUntil ?? null;
    },
    setRateLimitRemaining(n) {
      rateRemaining = n;
    },
    requests: basics.requests,
    setWebhook: basics.setWebhook,
    hooksSettled: basics.hooksSettled,
    close: () => server.close(),
  };
}

/** The events list's `status` filter: a code, or `successful`, `client_failure`, `server_failure`. */
function statusMatches(responseStatus: string, filter: string): boolean {
  const code = Number(responseStatus);
  if (filter === 'successful') return code >= 200 && code < 300;
  if (filter === 'client_failure') return code >= 400 && code < 500;
  if (filter === 'server_failure') return code >= 500 && code < 600;
  return responseStatus === filter;
}

function publicJob(j: JobState): GitLabJob {
  return {
    id: j.id,
    projectId: j.projectId,
    tags: [...j.tags],
    status: j.status,
    ...(j.runnerId === undefined ? {} : { runnerId: j.runnerId }),
    ...(j.runnerScope === undefined ? {} : { runnerScope: j.runnerScope }),
    createdAt: j.createdAt,
    ...(j.startedAt === undefined ? {} : { startedAt: j.startedAt }),
  };
}

/** `cancelJob`: a pending job ends as canceled; a running one goes canceling until its runner reports. */
function cancelPending(job: JobState | undefined, jobId: number): void {
  if (!job) throw new Error(`no job ${jobId}`);
  if (job.status === 'running') {
    job.status = 'canceling';
    return;
  }
  if (job.status !== 'pending') throw new Error(`job ${jobId} is ${job.status}: only a pending or running job is cancelled`);
  job.status = 'canceled';
  job.finishedAt = new Date().toISOString();
}
