import type { EventSink } from '../events';
import { gitlabJobFor } from './assign';
import { authorizationCredential, Faults, rateLimitHeaders, jsonObject, linkHeader, pageParams, randomToken, startJsonServer, type HttpAnswer, type HttpRequest } from './http';

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
 */
export interface GitLabJob {
  id: number;
  projectId: number;
  tags: string[];
  status: 'pending' | 'running' | 'success' | 'failed';
  runnerId?: number;
}

export interface GitLabRunnerRecord {
  id: number;
  description: string;
  tagList: string[];
  runUntagged: boolean;
  runnerType: string;
  groupId?: number;
  token: string;
  contactedAt?: string;
}

export interface LoopbackGitLab {
  /** Base URL (FleetConfig gitlab.url); the API is at /api/v4. */
  readonly url: string;
  /** The personal/group access token to put in SSM. */
  readonly accessToken: string;
  addJob(projectId: number, tags: string[]): GitLabJob;
  jobs(): GitLabJob[];
  runners(): GitLabRunnerRecord[];
  /**
   * The next `times` (default 1) requests matching answer `status` before any routing or auth;
   * a 429 carries `retry-after: 1`, as GitLab's rate limit answers do.
   */
  failNext(match: { method: string; path: RegExp }, status: number, times?: number): void;
  close(): Promise<void>;
}

export interface LoopbackGitLabOptions {
  /** The group the access token administers; group runners must name it. */
  readonly groupId: number;
  readonly onEvent?: EventSink;
  /** How long a fake runner works on a job (default 1): sent as the job's LOCAL_JOB_SECONDS variable. */
  readonly jobSeconds?: number;
}

const RUNNER_TYPES = new Set(['instance_type', 'group_type', 'project_type']);
/** GitLab shows a runner online while it contacted the server within the last 2 hours. */
const ONLINE_WINDOW_MS = 2 * 60 * 60_000;
const JOB_TIMEOUT_S = 3600;

interface RunnerState extends GitLabRunnerRecord {
  readonly projectId?: number;
  readonly createdAt: string;
}

interface JobState extends GitLabJob {
  readonly pipelineId: number;
  readonly token: string;
  readonly createdAt: string;
  startedAt?: string;
  finishedAt?: string;
  trace: string;
}

export async function startLoopbackGitLab(opts: LoopbackGitLabOptions): Promise<LoopbackGitLab> {
  if (!Number.isSafeInteger(opts.groupId) || opts.groupId < 1) throw new Error(`groupId ${opts.groupId} is not a GitLab group id`);
  const jobSeconds = opts.jobSeconds ?? 1;
  const accessToken = randomToken('glpat-', 15);
  const faults = new Faults();
  const runners = new Map<number, RunnerState>();
  const jobs = new Map<number, JobState>();
  let nextRunnerId = 101;
  let nextJobId = 7001;
  let nextPipelineId = 501;
  let base = '';
  const iso = () => new Date().toISOString();

  const unauthorized: HttpAnswer = { status: 401, body: { message: '401 Unauthorized' } };
  const forbidden: HttpAnswer = { status: 403, body: { message: '403 Forbidden' } };
  const notFound = (what = ''): HttpAnswer => ({ status: 404, body: { message: `404 ${what ? `${what} ` : ''}Not Found` } });
  const badRequest = (message: string): HttpAnswer => ({ status: 400, body: { message: `400 Bad request - ${message}` } });

  function status(r: RunnerState): string {
    if (r.contactedAt === undefined) return 'never_contacted';
    return Date.now() - Date.parse(r.contactedAt) < ONLINE_WINDOW_MS ? 'online' : 'offline';
  }

  function runnerJson(r: RunnerState): Record<string, unknown> {
    return {
      id: r.id,
      description: r.description,
      ip_address: null,
      active: true,
      paused: false,
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
      web_url: `${base}/group-${opts.groupId}/project-${j.projectId}/-/jobs/${j.id}`,
    };
  }

  /** The REST API's credential: `PRIVATE-TOKEN`, or an OAuth-style bearer. */
  function apiAuthorized(req: HttpRequest): boolean {
    const header = req.headers['private-token'];
    const token = typeof header === 'string' ? header : authorizationCredential(req.headers);
    return token === accessToken;
  }

  function route(req: HttpRequest): HttpAnswer {
    const fault = faults.take(req.method, req.path);
    if (fault !== undefined) return { status: fault, headers: rateLimitHeaders(fault), body: { message: fault === 429 ? 'Retry later' : `${fault} Injected fault` } };
    if (!req.path.startsWith('/api/v4/')) return notFound();
    const path = req.path.slice('/api/v4'.length);
    // The runner API authenticates with tokens in the request, not with PRIVATE-TOKEN.
    if (path === '/jobs/request' || /^\/jobs\/\d+(\/trace)?$/.test(path) || path === '/runners/verify' || (path === '/runners' && req.method === 'DELETE')) return runnerApi(req, path);
    if (!apiAuthorized(req)) return unauthorized;
    return restApi(req, path);
  }

  function restApi(req: HttpRequest, path: string): HttpAnswer {
    if (path === '/user/runners' && req.method === 'POST') return createRunner(req.body);
    let m: RegExpExecArray | null;
    if ((m = /^\/runners\/(\d+)$/.exec(path)) && req.method === 'DELETE') {
      if (!runners.delete(Number(m[1]))) return notFound('Runner');
      return { status: 204 };
    }
    if ((m = /^\/runners\/(\d+)$/.exec(path)) && req.method === 'GET') {
      const r = runners.get(Number(m[1]));
      return r ? { status: 200, body: { ...runnerJson(r), tag_list: [...r.tagList], run_untagged: r.runUntagged, locked: r.runnerType === 'project_type', contacted_at: r.contactedAt ?? null } } : notFound('Runner');
    }
    if ((m = /^\/(?:runners\/all|groups\/(\d+)\/runners|projects\/(\d+)\/runners)$/.exec(path)) && req.method === 'GET') {
      if (m[1] !== undefined && Number(m[1]) !== opts.groupId) return notFound('Group');
      const type = req.query.get('type');
      if (type !== null && !RUNNER_TYPES.has(type)) return { status: 400, body: { error: 'type does not have a valid value' } };
      // What each list shows (api/runners.md): every runner; the group's and instance runners; the
      // project's, its group's and instance runners.
      const visible = [...runners.values()].filter((r) => {
        if (m![1] !== undefined) return r.runnerType === 'instance_type' || r.groupId === opts.groupId;
        if (m![2] !== undefined) return r.runnerType !== 'project_type' || r.projectId === Number(m![2]);
        return true;
      });
      const all = visible.filter((r) => type === null || r.runnerType === type).sort((a, b) => a.id - b.id);
      const { page, perPage } = pageParams(req.query, 20);
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
        body: all.slice((page - 1) * perPage, page * perPage).map(runnerJson),
      };
    }
    if ((m = /^\/projects\/(\d+)\/jobs\/(\d+)$/.exec(path)) && req.method === 'GET') {
      const job = jobs.get(Number(m[2]));
      return job && job.projectId === Number(m[1]) ? { status: 200, body: jobJson(job) } : notFound();
    }
    return notFound();
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
      if (Number(b.group_id) !== opts.groupId) return forbidden;
      groupId = opts.groupId;
    }
    if (b.runner_type === 'project_type') {
      if (b.project_id === undefined) return badRequest('project_id is missing');
      projectId = Number(b.project_id);
      if (!Number.isSafeInteger(projectId) || projectId < 1) return notFound('Project');
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
        // The fake runner works this long instead of running the script.
        { key: 'LOCAL_JOB_SECONDS', value: String(jobSeconds), public: true, masked: false },
      ],
      steps: [{ name: 'script', script: [`sleep ${jobSeconds}`], timeout: JOB_TIMEOUT_S, when: 'on_success', allow_failure: false }],
      image: null,
      services: [],
      artifacts: [],
      cache: [],
      credentials: [],
      dependencies: [],
      features: { trace_sections: true, failure_reasons: ['script_failure', 'runner_system_failure'] },
    };
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
      r.contactedAt = iso();
      const job = gitlabJobFor(r, jobs.values());
      if (!job) return { status: 204, headers: { 'x-gitlab-last-update': String(jobs.size) } };
      job.status = 'running';
      job.runnerId = r.id;
      job.startedAt = iso();
      return { status: 201, body: jobRequestAnswer(job) };
    }
    const m = /^\/jobs\/(\d+)(\/trace)?$/.exec(path);
    const job = m ? jobs.get(Number(m[1])) : undefined;
    if (m?.[2] !== undefined && req.method === 'PATCH') {
      if (!job) return notFound();
      if (req.headers['job-token'] !== job.token) return forbidden;
      if (job.status !== 'running') return { ...forbidden, headers: { 'job-status': job.status } };
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
      // GitLab accepts updates only while the job is running on a runner.
      if (job.status !== 'running') return { status: 403, body: { message: '403 Forbidden - Job is not running' }, headers: { 'job-status': job.status } };
      if (b.state === 'running') return { status: 200, headers: { 'job-status': 'running' } };
      // Ci::UpdateBuildStateService knows these three; anything else is 400.
      if (b.state !== 'success' && b.state !== 'failed') return badRequest(`state "${String(b.state)}" is not running, success or failed`);
      job.status = b.state;
      job.finishedAt = iso();
      if (b.state === 'failed') return { status: 200, headers: { 'job-status': 'failed' } };
      const runner = job.runnerId === undefined ? undefined : runners.get(job.runnerId);
      opts.onEvent?.({ t: Date.now(), kind: 'job-done', provider: 'gitlab', ciJobId: String(job.id), ...(runner ? { runnerName: runner.description } : {}) });
      return { status: 200, headers: { 'job-status': 'success' } };
    }
    return notFound();
  }

  const server = await startJsonServer(route);
  base = server.url;
  return {
    url: server.url,
    accessToken,
    addJob(projectId, tags) {
      if (!Number.isSafeInteger(projectId) || projectId < 1) throw new Error(`projectId ${projectId} is not a GitLab project id`);
      if (!Array.isArray(tags) || tags.some((t) => typeof t !== 'string' || t === '')) throw new Error('tags must be non-empty strings');
      const job: JobState = { id: nextJobId++, projectId, tags: [...tags], status: 'pending', pipelineId: nextPipelineId++, token: randomToken('glcbt-', 15), createdAt: iso(), trace: '' };
      jobs.set(job.id, job);
      return publicJob(job);
    },
    jobs: () => [...jobs.values()].sort((a, b) => a.id - b.id).map(publicJob),
    runners: () =>
      [...runners.values()]
        .sort((a, b) => a.id - b.id)
        .map((r) => ({
          id: r.id,
          description: r.description,
          tagList: [...r.tagList],
          runUntagged: r.runUntagged,
          runnerType: r.runnerType,
          ...(r.groupId === undefined ? {} : { groupId: r.groupId }),
          token: r.token,
          ...(r.contactedAt === undefined ? {} : { contactedAt: r.contactedAt }),
        })),
    failNext: (match, status, times) => faults.add(match, status, times),
    close: () => server.close(),
  };
}

function publicJob(j: JobState): GitLabJob {
  return { id: j.id, projectId: j.projectId, tags: [...j.tags], status: j.status, ...(j.runnerId === undefined ? {} : { runnerId: j.runnerId }) };
}
