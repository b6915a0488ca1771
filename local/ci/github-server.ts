import { createPublicKey, generateKeyPairSync, randomUUID, verify, type KeyObject } from 'node:crypto';
import { githubJobFor, type GitHubRunnerScope } from './assign';
import { checkGitHubQuery } from './github-bounds';
import { authorizationCredential, rateLimitHeaders, jsonObject, linkHeader, randomToken, startJsonServer, type HttpAnswer, type HttpRequest } from './http';
import { githubWorkflowJobInProgress } from '../deliveries';
import { scaleSetService, type LoopbackScaleSets, type ScaleSetServiceOptions } from './scale-set-service';
import { byId, checkedLabels, serverBasics, type LocalJobContainers, type LocalJobOptions, type LoopbackServerOptions, type LoopbackWebhook } from './server-basics';

/**
 * A loopback GitHub for `npm run local`: the REST routes the project's GitHub provider calls
 * (lambdas/ci/github.ts through @octokit), with GitHub's authentication (an App JWT signed
 * RS256 with the App's key for the App routes, installation tokens for the rest), and a
 * runner side under `/_local/github/` that the fake `local/runner/run.sh` speaks in place of
 * the Actions service protocol. Every authenticated list request's query is checked against
 * GitHub's published bounds (github-bounds.ts): an enum value outside its list is a 422, a
 * `per_page` above 100 is served as 100, as GitHub does.
 *
 * Behaviour as GitHub's: a just-in-time runner is registered (offline) when its config is
 * generated; once connected it takes the OLDEST queued job whose labels it all has (so a job
 * may land on another runner than the one launched for it); after its one job GitHub removes
 * the JIT registration. A connected runner that stops talking to GitHub (killed, powered off)
 * is lost after a bound: it goes offline and not busy, and the job it held fails ("lost
 * communication with the server"); its registration stays until deleted (GitHub removes such
 * an ephemeral runner only after a day).
 */
export interface GitHubJob {
  id: number;
  runId: number;
  repository: string /* owner/repo */;
  labels: string[];
  status: 'queued' | 'in_progress' | 'completed';
  /** Set once completed: `failure` when its runner was lost mid-job, `cancelled` when cancelled while queued. */
  conclusion?: 'success' | 'failure' | 'cancelled';
  runnerName?: string;
  /** GitHub's `created_at` and `started_at` (ISO): how long the job waited for a runner. */
  createdAt?: string;
  startedAt?: string;
  /** Where the runner that took it was registered: `org:<login>`, `enterprise:<slug>` or `<owner>/<repo>`. */
  runnerScope?: string;
}

export interface GitHubRunnerRecord {
  id: number;
  name: string;
  labels: string[];
  status: 'online' | 'offline';
  busy: boolean;
  runnerGroupId: number;
}

export interface LoopbackGitHub {
  /** API base, e.g. http://127.0.0.1:PORT (FleetConfig github.apiUrl). */
  readonly url: string;
  readonly appId: string;
  readonly organization: string;
  /** Every organisation the App is installed on, `organization` first: each is its own installation. */
  readonly organizations: readonly string[];
  /** The enterprise whose runner routes this GitHub serves, with the classic PAT they take. */
  readonly enterprise?: { readonly slug: string; readonly token: string };
  /** A fresh RSA key (PKCS#1 PEM, as GitHub hands them out): the App's key to put in SSM. */
  readonly privateKeyPem: string;
  /** Every App installed on the organisation, the first being `appId`; each with its own key, installation and rate limits. */
  readonly apps: readonly LoopbackGitHubApp[];
  /**
   * A queued workflow job, in a run of its own unless `runId` names one of an earlier job.
   * With `options.script` the fake runner that takes it runs that bash script as the job
   * (local/runner/run.sh) instead of only waiting the job's seconds.
   */
  addJob(repository: string, labels: string[], runId?: number, options?: LocalJobOptions): GitHubJob;
  /**
   * The App's delivery log gains a `workflow_job` "queued" delivery of the job, answered with
   * `statusCode` (GitHub's outcome of its attempt); returns the delivery's GUID.
   */
  recordDelivery(jobId: number, statusCode: number): string;
  /** The App's webhook deliveries, newest first, as `GET /app/hook/deliveries` lists them. */
  deliveries(): GitHubHookDelivery[];
  /** Resolves once every redelivery asked for so far has been attempted. */
  redeliveriesSettled(): Promise<void>;
  /** Requests served (after faults), in order: the reconciler's budget is counted from these. */
  requests(): GitHubRequest[];
  /**
   * The App's webhook: from now on each job a runner takes is announced to it by a signed
   * `workflow_job` "in_progress" delivery, as GitHub sends one for every job.
   */
  setWebhook(webhook: LoopbackWebhook): void;
  /** Resolves once every delivery sent to the webhook so far has been answered. */
  hooksSettled(): Promise<void>;
  /**
   * Sets what is left of a credential's hourly rate limit (GitHub answers 403 once it is 0), of
   * App `appId` or of every App (an installation's: on `organization` alone, or on every one);
   * `pat`: of the enterprise token's user.
   */
  setRateLimitRemaining(credential: 'app' | 'installation' | 'pat', remaining: number, appId?: string, organization?: string): void;
  jobs(): GitHubJob[];
  /**
   * Cancels a queued job (the run's "Cancel workflow"): completed, conclusion `cancelled`, so no
   * runner can take it and the queued-jobs listing no longer shows it. Throws for a job a runner holds.
   */
  cancelJob(jobId: number): void;
  /** Registrations as GitHub holds them now. */
  runners(): GitHubRunnerRecord[];
  /**
   * The next `times` (default 1) requests matching answer `status` before any routing or auth;
   * a 429 carries `retry-after: 1`, as GitHub's secondary rate limit answers do.
   */
  failNext(match: { method: string; path: RegExp }, status: number, times?: number): void;
  /** The runner scale set service (local/ci/scale-set-service.ts): its scale sets, sessions and fault hooks. */
  readonly scaleSets: LoopbackScaleSets;
  close(): Promise<void>;
}

/** A request the loopback GitHub served, with the credential it came with. */
export interface GitHubRequest {
  readonly method: string;
  readonly path: string;
  /** `actions-service`: a call of the scale-set protocol (admin token, queue token or registration token). */
  readonly credential: 'app' | 'installation' | 'pat' | 'none' | 'actions-service';
  /** The App whose JWT or installation token it carried (absent: neither was valid). */
  readonly appId?: string;
  /** The answer's status, on the App-authenticated routes (a 403 with `x-ratelimit-remaining: 0` is a refusal for the rate limit). */
  readonly status?: number;
}

/** One GitHub App of the loopback: its id and its key. */
export interface LoopbackGitHubApp {
  readonly appId: string;
  readonly privateKeyPem: string;
}

export interface LoopbackGitHubOptions extends LoopbackServerOptions {
  readonly organization: string;
  /**
   * More organisations the App is installed on, each with an installation of its own (its own
   * id, tokens that reach only its organisation); any other organisation is one the App is not
   * installed on: `GET /orgs/{org}/installation` answers 404.
   */
  readonly organizations?: string[];
  /**
   * An enterprise whose organisations are all of the above: its runner routes
   * (`/enterprises/{slug}/actions/runners...`) take only the classic personal access token
   * `token`, as GitHub's do (no App token: docs/github.md, "Enterprise runners").
   */
  readonly enterprise?: { readonly slug: string; readonly token: string };
  readonly appId?: string;
  /**
   * Further Apps installed on the organisation (several Apps sharing the load): each has its own
   * key, installation and rate limits, as GitHub counts them per App and per installation. Only
   * the first App (`appId`) has the webhook and its delivery log.
   */
  readonly additionalAppIds?: string[];
  /** How long a connected runner waits for a job before it gives up and exits non-zero (default 30). */
  readonly runnerWaitSeconds?: number;
  /** How often a waiting runner asks for a job (default 0.5). */
  readonly runnerPollSeconds?: number;
  /**
   * How long a connected runner may go without a word (beyond its job's seconds while it
   * works) before GitHub counts it lost (default 30; GitHub's own bound is minutes).
   */
  readonly runnerLostSeconds?: number;
  /** The clock (epoch ms) runner liveness is judged by; tests move it instead of waiting. */
  readonly now?: () => number;
  /**
   * GitHub as it was seen misbehaving (issue 11): the runner list says `busy: false` for a
   * runner in the middle of its job, and DELETE of that runner succeeds (204, no 422). The
   * deleted runner's job is cut off: it completes as a failure. Default false.
   */
  readonly busyFalseMidJob?: boolean;
  /**
   * Sends a redelivery (`POST /app/hook/deliveries/{id}/attempts`) of a job's queued delivery
   * with its original GUID and answers with the webhook's status code; without it a
   * redelivery fails to connect (status code 0).
   */
  readonly redeliver?: (delivery: { readonly guid: string; readonly job: GitHubJob }) => Promise<number>;
  /** Each credential's hourly rate limit (`x-ratelimit-limit`; default 5000, an installation's floor). */
  readonly rateLimit?: number;
  /** Repositories of the installation besides those its jobs are in ("owner/repo"). */
  readonly repositories?: string[];
  /** The scale-set service's bounds (long poll, session and token lives, runner groups). */
  readonly scaleSet?: ScaleSetServiceOptions;
}

/** One entry of the App's delivery log, in `GET /app/hook/deliveries`' wire format. */
export interface GitHubHookDelivery {
  readonly id: number;
  readonly guid: string;
  readonly delivered_at: string;
  readonly redelivery: boolean;
  readonly duration: number;
  readonly status: string;
  readonly status_code: number;
  readonly event: string;
  readonly action: string | null;
  readonly installation_id: number | null;
  readonly repository_id: number | null;
  readonly throttled_at: string | null;
}

/** The organisation's runner groups: GitHub's default group is 1 and the only one here. */
const RUNNER_GROUPS = new Map([[1, 'Default']]);
/** GitHub refuses an App JWT whose expiry is more than 10 minutes ahead; a minute of clock drift is allowed. */
const MAX_JWT_LIFETIME_S = 600;
const CLOCK_DRIFT_S = 60;
const INSTALLATION_TOKEN_TTL_MS = 60 * 60_000;

interface RunnerState extends GitHubRunnerRecord {
  /** "org:<login>", "owner/repo" or "enterprise:<slug>" (lower case): where the runner is registered. */
  readonly scope: string;
  readonly secret: string;
  /** The JIT config is single-use: a second connection is refused. */
  connected: boolean;
  jobId?: number;
  /** When the runner last called (its clock), while connected. */
  lastContact?: number;
  /** A runner of a scale set: it takes the jobs assigned to its scale set only. */
  readonly scaleSetId?: number;
}

interface JobState extends GitHubJob {
  readonly createdAt: string;
  readonly script?: string;
  readonly containers?: LocalJobContainers;
  startedAt?: string;
  completedAt?: string;
  runnerId?: number;
}

/** What `run.sh --jitconfig` decodes: base64 of this JSON (the real one holds the runner's credential files). */
export interface LocalJitConfig {
  readonly url: string;
  readonly runnerId: number;
  readonly name: string;
  readonly secret: string;
}

export async function startLoopbackGitHub(opts: LoopbackGitHubOptions): Promise<LoopbackGitHub> {
  const organizations = [opts.organization, ...(opts.organizations ?? [])];
  for (const org of organizations) if (!/^[A-Za-z0-9-]+$/.test(org)) throw new Error(`organization "${org}" is not a GitHub login`);
  const organization = opts.organization;
  const appId = opts.appId ?? '424242';
  if (new Set([appId, ...(opts.additionalAppIds ?? [])]).size !== 1 + (opts.additionalAppIds ?? []).length) throw new Error('every App id must be distinct');
  const basics = serverBasics<GitHubRequest>(opts);
  const jobSeconds = basics.jobSeconds;
  const waitSeconds = opts.runnerWaitSeconds ?? 30;
  const pollSeconds = opts.runnerPollSeconds ?? 0.5;
  const lostMs = (opts.runnerLostSeconds ?? 30) * 1000;
  const now = opts.now ?? Date.now;
  const rateLimit = opts.rateLimit ?? 5000;
  const firstInstallation = 4_100_000 + Math.floor(Math.random() * 1000) * 100;
  /** Installed organisations by login (lower case); `id` is the first App's installation (deliveries name it). */
  const installations = new Map(organizations.map((login, i) => [login.toLowerCase(), { id: firstInstallation + i, index: i, login }]));
  const enterprise = opts.enterprise;
  // Each App has its own installation on every organisation, hence its own budgets (GitHub counts per installation).
  const apps: AppState[] = [appId, ...(opts.additionalAppIds ?? [])].map((id, i) => {
    const { privateKey, publicKey } = generateKeyPairSync('rsa', {
      modulusLength: 2048,
      privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
      publicKeyEncoding: { type: 'spki', format: 'pem' },
    });
    return {
      appId: id,
      privateKeyPem: privateKey,
      key: createPublicKey(publicKey),
      firstInstallation: firstInstallation + i * organizations.length,
      remaining: { app: rateLimit, installation: new Map([...installations.keys()].map((org) => [org, rateLimit])) },
    };
  });
  const firstApp = apps[0]!;
  const installationIdOf = (app: AppState, org: string) => app.firstInstallation + installations.get(org)!.index;
  /** Installation token -> its expiry, the App and the organisation (lower case) whose installation minted it. */
  const tokens = new Map<string, { expiresAt: number; app: AppState; org: string }>();
  let patRemaining = rateLimit;
  const runners = new Map<number, RunnerState>();
  const jobs = new Map<number, JobState>();
  const hookDeliveries: (GitHubHookDelivery & { jobId: number })[] = [];
  const pendingRedeliveries = new Set<Promise<void>>();
  let rateReset = Math.floor(Date.now() / 1000) + 3600;
  const extraRepositories = (opts.repositories ?? []).map((r) => r.toLowerCase());
  let nextDeliveryId = 1;
  let nextRunnerId = 1;
  let nextJobId = 80_000_001;
  let nextRunId = 9_000_001;
  let base = '';
  const scaleSets = scaleSetService(
    {
      base: () => base,
      now,
      scopeOfPath: (path) => {
        const parts = path.replace(/^\/+|\/+$/g, '').split('/');
        const login = installedOrg(parts[0]);
        if (login === undefined || parts.length > 2 || parts[1] === '') return undefined;
        return parts.length === 1 ? `org:${login}` : `${login}/${parts[1]}`.toLowerCase();
      },
      inScope: (scope, repository) => (scope.startsWith('org:') ? repository.split('/')[0]!.toLowerCase() === scope.slice('org:'.length) : repository.toLowerCase() === scope),
      jobs: () => jobs.values(),
      registerRunner(scope, name, labels, runnerGroupId, scaleSetId) {
        if ([...runners.values()].some((r) => r.scope === scope && r.name.toLowerCase() === name.toLowerCase())) return 'exists';
        const runner: RunnerState = { id: nextRunnerId++, name, labels, status: 'offline', busy: false, runnerGroupId, scope, secret: randomToken('', 32), connected: false, scaleSetId };
        runners.set(runner.id, runner);
        return runner;
      },
      runners: (scaleSetId) => [...runners.values()].filter((r) => r.scaleSetId === scaleSetId),
      log: (req, status) => basics.log({ method: req.method, path: req.path, credential: 'actions-service', status }),
    },
    opts.scaleSet,
  );

  /** The organisation (lower case) when the App is installed on it. */
  const installedOrg = (login: string | undefined) => (login !== undefined && installations.has(login.toLowerCase()) ? login.toLowerCase() : undefined);
  const iso = () => new Date().toISOString();

  /** GitHub's check of an App JWT: RS256 with the App's key, issuer the App id, a bounded lifetime. */
  function appOfJwt(req: HttpRequest): AppState | string {
    const jwt = authorizationCredential(req.headers);
    if (!jwt) return 'Requires authentication';
    const [h, p, s, extra] = jwt.split('.');
    if (!h || !p || !s || extra !== undefined) return 'A JSON web token could not be decoded';
    const header = jsonObject(Buffer.from(h, 'base64url').toString('utf8'));
    const payload = jsonObject(Buffer.from(p, 'base64url').toString('utf8'));
    if (!header || !payload || header.alg !== 'RS256') return 'A JSON web token could not be decoded';
    const app = apps.find((a) => a.appId === String(payload.iss));
    if (!app) return 'Integration not found';
    if (!verify('RSA-SHA256', Buffer.from(`${h}.${p}`), app.key, Buffer.from(s, 'base64url'))) return 'A JSON web token could not be decoded';
    const now = Date.now() / 1000;
    if (typeof payload.exp !== 'number' || typeof payload.iat !== 'number') return "'Expiration time' claim ('exp') and 'Issued at' claim ('iat') are required";
    if (payload.exp <= now) return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires";
    if (payload.exp > now + MAX_JWT_LIFETIME_S + CLOCK_DRIFT_S) return "'Expiration time' claim ('exp') is too far in the future";
    if (payload.iat > now + CLOCK_DRIFT_S) return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued";
    return app;
  }

  /** The live installation token a request carries: its App and organisation (lower case). */
  function heldToken(req: HttpRequest): { app: AppState; org: string } | undefined {
    const token = authorizationCredential(req.headers);
    const held = token === undefined ? undefined : tokens.get(token);
    return held !== undefined && held.expiresAt > Date.now() ? held : undefined;
  }
  const tokenOrg = (req: HttpRequest) => heldToken(req)?.org;

  function installation(app: AppState, org: string): Record<string, unknown> {
    const inst = installations.get(org)!;
    return {
      id: installationIdOf(app, org),
      app_id: Number(app.appId),
      account: { login: inst.login, type: 'Organization' },
      target_type: 'Organization',
      repository_selection: 'all',
      permissions: { organization_self_hosted_runners: 'write', actions: 'read', administration: 'write' },
    };
  }

  function runnerJson(r: RunnerState): Record<string, unknown> {
    return {
      id: r.id,
      name: r.name,
      os: r.status === 'online' ? 'Linux' : 'unknown',
      status: r.status,
      busy: opts.busyFalseMidJob ? false : r.busy,
      ephemeral: true,
      runner_group_id: r.runnerGroupId,
      labels: r.labels.map((name, i) => ({ id: i + 1, name, type: name === 'self-hosted' ? 'read-only' : 'custom' })),
    };
  }

  function jobJson(j: JobState): Record<string, unknown> {
    const [owner, repo] = j.repository.split('/');
    const runner = j.runnerId === undefined ? undefined : { id: j.runnerId, name: j.runnerName };
    return {
      id: j.id,
      run_id: j.runId,
      run_url: `${base}/repos/${owner}/${repo}/actions/runs/${j.runId}`,
      url: `${base}/repos/${owner}/${repo}/actions/jobs/${j.id}`,
      html_url: `https://github.com/${owner}/${repo}/actions/runs/${j.runId}/job/${j.id}`,
      status: j.status,
      conclusion: j.conclusion ?? null,
      created_at: j.createdAt,
      started_at: j.startedAt ?? null,
      completed_at: j.completedAt ?? null,
      name: 'build',
      workflow_name: 'CI',
      head_branch: 'main',
      labels: [...j.labels],
      steps: [],
      runner_id: runner?.id ?? null,
      runner_name: runner?.name ?? null,
      runner_group_id: runner ? 1 : null,
      runner_group_name: runner ? RUNNER_GROUPS.get(1) : null,
    };
  }

  /**
   * A route's runner scope ("org:<login>" or "owner/repo", lower case) when it lies in an
   * organisation the App is installed on and, given `org`, in that installation's organisation
   * (an installation token reaches its own account only).
   */
  function scopeOf(m: RegExpExecArray, org?: string): string | undefined {
    const login = installedOrg(m.groups?.org ?? m.groups?.owner);
    if (login === undefined || (org !== undefined && login !== org)) return undefined;
    return m.groups?.org !== undefined ? `org:${login}` : `${m.groups?.owner}/${m.groups?.repo}`.toLowerCase();
  }

  const notFound: HttpAnswer = { status: 404, body: { message: 'Not Found', documentation_url: 'https://docs.github.com/rest' } };
  const SCOPE = '(?:orgs/(?<org>[^/]+)|repos/(?<owner>[^/]+)/(?<repo>[^/]+))';
  const routes = {
    installation: new RegExp(`^/${SCOPE}/installation$`),
    accessTokens: /^\/app\/installations\/(\d+)\/access_tokens$/,
    jitconfig: new RegExp(`^/${SCOPE}/actions/runners/generate-jitconfig$`),
    registrationToken: new RegExp(`^/${SCOPE}/actions/runners/registration-token$`),
    runners: new RegExp(`^/${SCOPE}/actions/runners$`),
    runner: new RegExp(`^/${SCOPE}/actions/runners/(?<id>\\d+)$`),
    enterprise: /^\/enterprises\/(?<enterprise>[^/]+)\/actions\/runners(?:\/(?<rest>generate-jitconfig|\d+))?$/,
    job: /^\/repos\/(?<owner>[^/]+)\/(?<repo>[^/]+)\/actions\/jobs\/(?<id>\d+)$/,
    local: /^\/_local\/github\/runners\/(?<id>\d+)\/(?<action>session|acquire|jobs\/(?<job>\d+)\/complete)$/,
    deliveries: /^\/app\/hook\/deliveries$/,
    attempts: /^\/app\/hook\/deliveries\/(?<id>\d+)\/attempts$/,
    repositories: /^\/installation\/repositories$/,
    runs: /^\/repos\/(?<owner>[^/]+)\/(?<repo>[^/]+)\/actions\/runs$/,
    runJobs: /^\/repos\/(?<owner>[^/]+)\/(?<repo>[^/]+)\/actions\/runs\/(?<id>\d+)\/jobs$/,
  };

  /**
   * Runners that went silent are lost: judged whenever GitHub is asked anything, so that no
   * timer outlives the server. A working runner says nothing for its job's seconds.
   */
  function markLost(): void {
    const t = now();
    for (const r of runners.values()) {
      if (r.status !== 'online' || r.lastContact === undefined) continue;
      if (t - r.lastContact <= lostMs + (r.busy ? jobSeconds * 1000 : 0)) continue;
      r.status = 'offline';
      const job = r.jobId === undefined ? undefined : jobs.get(r.jobId);
      if (job && job.status === 'in_progress') {
        job.status = 'completed';
        job.conclusion = 'failure';
        job.completedAt = iso();
        scaleSets.jobCompleted(job, r, 'failed');
      }
      r.busy = false;
      delete r.jobId;
    }
  }

  function route(req: HttpRequest): HttpAnswer | Promise<HttpAnswer> {
    markLost();
    const fault = basics.faults.take(req.method, req.path);
    if (fault !== undefined) return { status: fault, headers: rateLimitHeaders(fault), body: { message: fault >= 500 ? 'Server Error' : fault === 429 ? 'You have exceeded a secondary rate limit.' : 'Injected fault' } };
    if (req.path.startsWith('/_local/')) return runnerSide(req);
    const scaleSetAnswer = scaleSets.route(req);
    if (scaleSetAnswer !== undefined) return scaleSetAnswer;
    if (req.path.startsWith('/enterprises/')) return enterpriseRoute(req);
    // Logged with the answer's status (routing is synchronous: the log keeps the arrival order).
    const logged = (entry: GitHubRequest, answer: HttpAnswer): HttpAnswer => {
      basics.log({ ...entry, status: answer.status });
      return answer;
    };
    if (req.path.startsWith('/app/') || routes.installation.test(req.path)) {
      const app = appOfJwt(req);
      const entry: GitHubRequest = { method: req.method, path: req.path, credential: 'app', ...(typeof app === 'string' ? {} : { appId: app.appId }) };
      if (typeof app === 'string') return logged(entry, { status: 401, body: { message: app, documentation_url: 'https://docs.github.com/rest' } });
      return logged(entry, counted({ kind: 'app', app }, req, (r) => appRoute(r, app)));
    }
    const held = heldToken(req);
    const entry: GitHubRequest = { method: req.method, path: req.path, credential: authorizationCredential(req.headers) ? 'installation' : 'none', ...(held ? { appId: held.app.appId } : {}) };
    if (!authorizationCredential(req.headers)) return logged(entry, { status: 401, body: { message: 'Requires authentication', documentation_url: 'https://docs.github.com/rest' } });
    if (!held) return logged(entry, { status: 401, body: { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' } });
    return logged(entry, counted({ kind: 'installation', app: held.app, org: held.org }, req, apiRoute));
  }

  /**
   * GitHub's primary rate limit: every authenticated answer carries `x-ratelimit-*` of its
   * credential; with nothing left, 403 "API rate limit exceeded" and `remaining: 0`.
   */
  function counted(budget: Budget, req: HttpRequest, handle: (req: HttpRequest) => HttpAnswer): HttpAnswer {
    // The hour GitHub counts in ends: every credential's limit is whole again.
    if (Date.now() / 1000 >= rateReset) {
      rateReset += 3600 * Math.ceil((Date.now() / 1000 - rateReset + 1) / 3600);
      for (const a of apps) {
        a.remaining.app = rateLimit;
        for (const org of a.remaining.installation.keys()) a.remaining.installation.set(org, rateLimit);
      }
      patRemaining = rateLimit;
    }
    // Counted per App's JWT, per installation (an App's on one organisation), and per PAT's user.
    const left = () => (budget.kind === 'app' ? budget.app.remaining.app : budget.kind === 'installation' ? budget.app.remaining.installation.get(budget.org)! : patRemaining);
    const exhausted = left() <= 0;
    const answer = exhausted
      ? { status: 403, body: { message: `API rate limit exceeded for ${budget.kind === 'app' ? 'the app' : budget.kind === 'pat' ? 'user' : `installation ID ${installationIdOf(budget.app, budget.org)}`}.`, documentation_url: 'https://docs.github.com/rest/overview/rate-limits-for-the-rest-api' } }
      : handle(req);
    if (!exhausted) {
      if (budget.kind === 'app') budget.app.remaining.app--;
      else if (budget.kind === 'installation') budget.app.remaining.installation.set(budget.org, left() - 1);
      else patRemaining--;
    }
    return {
      ...answer,
      headers: {
        ...answer.headers,
        'x-ratelimit-limit': String(rateLimit),
        'x-ratelimit-remaining': String(Math.max(0, left())),
        'x-ratelimit-used': String(rateLimit - Math.max(0, left())),
        'x-ratelimit-reset': String(rateReset),
        'x-ratelimit-resource': 'core',
      },
    };
  }

  function appRoute(req: HttpRequest, app: AppState): HttpAnswer {
    const checked = checkGitHubQuery(req.method, req.path, req.query);
    if ('refusal' in checked) return checked.refusal;
    const inst = routes.installation.exec(req.path);
    if (inst && req.method === 'GET') {
      // 404 for an account or repository the App is not installed on (GitHub's documented answer).
      const scope = scopeOf(inst);
      return scope === undefined ? notFound : { status: 200, body: installation(app, installedOrg(inst.groups?.org ?? inst.groups?.owner)!) };
    }
    // The delivery log is the first App's, the one with the webhook.
    if (routes.deliveries.test(req.path) && req.method === 'GET') return app === firstApp ? listDeliveries(req) : { status: 200, body: [] };
    const attempt = routes.attempts.exec(req.path);
    if (attempt && req.method === 'POST') return app === firstApp ? redeliverAttempt(Number(attempt.groups?.id)) : notFound;
    const tok = routes.accessTokens.exec(req.path);
    if (tok && req.method === 'POST') {
      // An App mints tokens for its own installations only.
      const org = [...installations.keys()].find((o) => installationIdOf(app, o) === Number(tok[1]));
      if (org === undefined) return notFound;
      const token = randomToken('ghs_', 27);
      const expiresAt = Date.now() + INSTALLATION_TOKEN_TTL_MS;
      tokens.set(token, { expiresAt, app, org });
      return { status: 201, body: { token, expires_at: new Date(expiresAt).toISOString().replace(/\.\d+Z$/, 'Z'), permissions: installation(app, org).permissions, repository_selection: 'all' } };
    }
    return notFound;
  }

  /** A token of one installation on another installed organisation's routes: GitHub refuses the integration. */
  const notAccessible: HttpAnswer = { status: 403, body: { message: 'Resource not accessible by integration', documentation_url: 'https://docs.github.com/rest' } };

  function apiRoute(req: HttpRequest): HttpAnswer {
    const checked = checkGitHubQuery(req.method, req.path, req.query);
    if ('refusal' in checked) return checked.refusal;
    const org = tokenOrg(req)!;
    const refused = (m: RegExpExecArray) => (scopeOf(m) === undefined ? notFound : notAccessible);
    let m: RegExpExecArray | null;
    if ((m = routes.jitconfig.exec(req.path)) && req.method === 'POST') {
      const scope = scopeOf(m, org);
      return scope === undefined ? refused(m) : generateJitConfig(scope, req.body);
    }
    if ((m = routes.registrationToken.exec(req.path)) && req.method === 'POST') {
      const scope = scopeOf(m, org);
      return scope === undefined ? refused(m) : scaleSets.registrationToken(scope);
    }
    if ((m = routes.runners.exec(req.path)) && req.method === 'GET') {
      const scope = scopeOf(m, org);
      return scope === undefined ? refused(m) : listRunners(req, scope);
    }
    if ((m = routes.runner.exec(req.path)) && req.method === 'DELETE') {
      const scope = scopeOf(m, org);
      return scope === undefined ? refused(m) : deleteRunner(Number(m.groups?.id), scope);
    }
    if (routes.repositories.test(req.path) && req.method === 'GET') {
      const all = installationRepositories(org);
      const { page, perPage } = pageOf(req);
      const lastPage = Math.max(1, Math.ceil(all.length / perPage));
      const headers: Record<string, string> = lastPage > 1 ? { link: linkHeader('github', base, req.path, req.query, page, lastPage) } : {};
      return { status: 200, headers, body: { total_count: all.length, repository_selection: 'all', repositories: all.slice((page - 1) * perPage, page * perPage).map(repositoryJson) } };
    }
    if ((m = routes.runs.exec(req.path)) && req.method === 'GET') {
      const full = `${m.groups?.owner}/${m.groups?.repo}`.toLowerCase();
      if (installedOrg(m.groups?.owner) !== org || !installationRepositories(org).includes(full)) return notFound;
      const status = req.query.get('status');
      const runs = [...new Set([...jobs.values()].filter((j) => j.repository.toLowerCase() === full).map((j) => j.runId))]
        .map((id) => ({ id, status: runStatus(id) }))
        .filter((r) => status === null || r.status === status)
        .sort((a, b) => b.id - a.id);
      const { page, perPage } = pageOf(req);
      return { status: 200, body: { total_count: runs.length, workflow_runs: runs.slice((page - 1) * perPage, page * perPage).map((r) => runJson(full, r.id, r.status)) } };
    }
    if ((m = routes.runJobs.exec(req.path)) && req.method === 'GET') {
      const full = `${m.groups?.owner}/${m.groups?.repo}`.toLowerCase();
      if (installedOrg(m.groups?.owner) !== org) return notFound;
      const inRun = [...jobs.values()].filter((j) => j.runId === Number(m!.groups?.id) && j.repository.toLowerCase() === full).sort((a, b) => a.id - b.id);
      if (inRun.length === 0) return notFound;
      const { page, perPage } = pageOf(req);
      return { status: 200, body: { total_count: inRun.length, jobs: inRun.slice((page - 1) * perPage, page * perPage).map(jobJson) } };
    }
    if ((m = routes.job.exec(req.path)) && req.method === 'GET') {
      const job = jobs.get(Number(m.groups?.id));
      if (installedOrg(m.groups?.owner) !== org) return notFound;
      if (!job || job.repository.toLowerCase() !== `${m.groups?.owner}/${m.groups?.repo}`.toLowerCase()) return notFound;
      return { status: 200, body: jobJson(job) };
    }
    return notFound;
  }

  function listRunners(req: HttpRequest, scope: string): HttpAnswer {
    const all = [...runners.values()].filter((r) => r.scope === scope).sort((a, b) => a.id - b.id);
    const { page, perPage } = pageOf(req);
    const lastPage = Math.max(1, Math.ceil(all.length / perPage));
    const headers: Record<string, string> = lastPage > 1 ? { link: linkHeader('github', base, req.path, req.query, page, lastPage) } : {};
    return { status: 200, headers, body: { total_count: all.length, runners: all.slice((page - 1) * perPage, page * perPage).map(runnerJson) } };
  }

  function deleteRunner(id: number, scope: string): HttpAnswer {
    const runner = runners.get(id);
    if (!runner || runner.scope !== scope) return notFound;
    if (runner.busy && !opts.busyFalseMidJob) return { status: 422, body: { message: `Bad request - Runner "${runner.name}" is still running a job` } };
    const held = runner.jobId === undefined ? undefined : jobs.get(runner.jobId);
    if (held && held.status === 'in_progress') {
      held.status = 'completed';
      held.conclusion = 'failure';
      held.completedAt = iso();
      scaleSets.jobCompleted(held, runner, 'failed');
    }
    runners.delete(runner.id);
    return { status: 204 };
  }

  /**
   * The enterprise's runner routes: a classic PAT only. GitHub documents that these endpoints
   * "do not work with GitHub App user access tokens, GitHub App installation access tokens, or
   * fine-grained personal access tokens" (REST "Self-hosted runners", enterprise endpoints).
   */
  function enterpriseRoute(req: HttpRequest): HttpAnswer {
    const m = routes.enterprise.exec(req.path);
    const credential = authorizationCredential(req.headers);
    basics.log({ method: req.method, path: req.path, credential: credential === undefined ? 'none' : tokens.has(credential) ? 'installation' : 'pat' });
    if (credential === undefined) return { status: 401, body: { message: 'Requires authentication', documentation_url: 'https://docs.github.com/rest' } };
    if (tokens.has(credential)) return notAccessible;
    if (!enterprise || credential !== enterprise.token) return { status: 401, body: { message: 'Bad credentials', documentation_url: 'https://docs.github.com/rest' } };
    return counted({ kind: 'pat' }, req, () => {
      if (!m || m.groups?.enterprise?.toLowerCase() !== enterprise.slug.toLowerCase()) return notFound;
      const checked = checkGitHubQuery(req.method, req.path, req.query);
      if ('refusal' in checked) return checked.refusal;
      const scope = `enterprise:${enterprise.slug.toLowerCase()}`;
      const rest = m.groups?.rest;
      if (rest === 'generate-jitconfig' && req.method === 'POST') return generateJitConfig(scope, req.body);
      if (rest === undefined && req.method === 'GET') return listRunners(req, scope);
      if (rest !== undefined && /^\d+$/.test(rest) && req.method === 'DELETE') return deleteRunner(Number(rest), scope);
      return notFound;
    });
  }

  /** The page and its size as GitHub reads the request (github-bounds.ts: above 100 is 100). */
  function pageOf(req: HttpRequest): { page: number; perPage: number } {
    const window = checkGitHubQuery(req.method, req.path, req.query);
    return 'refusal' in window ? { page: 1, perPage: 30 } : window;
  }

  /** An installation's repositories (all of its organisation's: repository_selection "all"), lower case; all installations' without `org`. */
  function installationRepositories(org?: string): string[] {
    const all = [...new Set([...extraRepositories, ...[...jobs.values()].map((j) => j.repository.toLowerCase())])].sort();
    return org === undefined ? all : all.filter((r) => r.split('/')[0] === org);
  }

  function repositoryJson(full: string): Record<string, unknown> {
    const [owner, name] = full.split('/') as [string, string];
    return { id: repositoryId(full), node_id: `R_${repositoryId(full)}`, name, full_name: full, private: true, archived: false, owner: { login: owner, type: 'Organization' } };
  }

  function repositoryId(full: string): number {
    return 700_000 + installationRepositories().indexOf(full.toLowerCase());
  }

  /** A run is in progress while any of its jobs is, queued while any waits, else completed. */
  function runStatus(runId: number): 'queued' | 'in_progress' | 'completed' {
    const inRun = [...jobs.values()].filter((j) => j.runId === runId);
    if (inRun.some((j) => j.status === 'in_progress')) return 'in_progress';
    return inRun.some((j) => j.status === 'queued') ? 'queued' : 'completed';
  }

  function runJson(full: string, id: number, status: string): Record<string, unknown> {
    const created = [...jobs.values()].filter((j) => j.runId === id).map((j) => j.createdAt).sort()[0];
    return {
      id,
      name: 'CI',
      status,
      conclusion: null,
      event: 'push',
      head_branch: 'main',
      run_attempt: 1,
      created_at: created,
      updated_at: created,
      url: `${base}/repos/${full}/actions/runs/${id}`,
      jobs_url: `${base}/repos/${full}/actions/runs/${id}/jobs`,
      repository: repositoryJson(full),
    };
  }

  /** GitHub's delivery list: newest first, cursor paging (`cursor`, a `link` rel="next"). */
  function listDeliveries(req: HttpRequest): HttpAnswer {
    const { perPage } = pageOf(req);
    const cursor = req.query.get('cursor');
    const after = cursor === null ? Infinity : Number(/^v1_(\d+)$/.exec(cursor)?.[1] ?? NaN);
    if (Number.isNaN(after)) return { status: 422, body: { message: 'Invalid cursor' } };
    const newest = [...hookDeliveries].sort((a, b) => b.id - a.id).filter((d) => d.id < after);
    const page = newest.slice(0, perPage);
    const headers: Record<string, string> = {};
    if (newest.length > perPage) {
      const q = new URLSearchParams(req.query);
      q.set('cursor', `v1_${page[page.length - 1]!.id}`);
      headers.link = `<${base}${req.path}?${q.toString()}>; rel="next"`;
    }
    return { status: 200, headers, body: page.map(({ jobId: _jobId, ...d }) => d) };
  }

  /** Accepted at once (202); the attempt runs after the answer, as GitHub's does. */
  function redeliverAttempt(id: number): HttpAnswer {
    const original = hookDeliveries.find((d) => d.id === id);
    if (!original) return notFound;
    const job = jobs.get(original.jobId);
    const attempt = (async () => {
      let statusCode = 0;
      try {
        statusCode = job && opts.redeliver ? await opts.redeliver({ guid: original.guid, job: publicJob(job) }) : 0;
      } catch {
        statusCode = 0;
      }
      addDelivery(original.jobId, original.guid, statusCode, true);
    })();
    pendingRedeliveries.add(attempt);
    void attempt.finally(() => pendingRedeliveries.delete(attempt));
    return { status: 202, body: {} };
  }

  function addDelivery(jobId: number, guid: string, statusCode: number, redelivery: boolean): void {
    const job = jobs.get(jobId);
    hookDeliveries.push({
      id: nextDeliveryId++,
      guid,
      delivered_at: iso(),
      redelivery,
      duration: 0.05,
      status: statusCode >= 200 && statusCode < 300 ? 'OK' : statusCode === 0 ? 'failed to connect' : `Invalid HTTP Response: ${statusCode}`,
      status_code: statusCode,
      event: 'workflow_job',
      action: 'queued',
      installation_id: job ? (installations.get(job.repository.split('/')[0]!.toLowerCase())?.id ?? null) : null,
      repository_id: job ? repositoryId(job.repository) : null,
      throttled_at: null,
      jobId,
    });
  }

  function generateJitConfig(scope: string, body: string): HttpAnswer {
    const b = jsonObject(body);
    const invalid = (message: string): HttpAnswer => ({ status: 422, body: { message: `Invalid request.\n\n${message}`, documentation_url: 'https://docs.github.com/rest/actions/self-hosted-runners' } });
    if (!b) return { status: 400, body: { message: 'Problems parsing JSON' } };
    if (typeof b.name !== 'string' || b.name === '' || b.name.length > 64) return invalid('"name" must be a string of 1 to 64 characters.');
    if (!Number.isSafeInteger(b.runner_group_id)) return invalid('"runner_group_id" must be an integer.');
    if (!Array.isArray(b.labels) || b.labels.length < 1 || b.labels.length > 100 || !b.labels.every((l) => typeof l === 'string' && l !== '')) {
      return invalid('"labels" must be 1 to 100 non-empty strings.');
    }
    if (b.work_folder !== undefined && typeof b.work_folder !== 'string') return invalid('"work_folder" must be a string.');
    if (!RUNNER_GROUPS.has(b.runner_group_id as number)) return notFound;
    const name = b.name;
    if ([...runners.values()].some((r) => r.scope === scope && r.name.toLowerCase() === name.toLowerCase())) {
      return { status: 409, body: { message: 'Already exists - A runner with the same name already exists' } };
    }
    const runner: RunnerState = {
      id: nextRunnerId++,
      name,
      labels: [...new Set(b.labels as string[])],
      status: 'offline',
      busy: false,
      runnerGroupId: b.runner_group_id as number,
      scope,
      secret: randomToken('', 32),
      connected: false,
    };
    runners.set(runner.id, runner);
    const config: LocalJitConfig = { url: base, runnerId: runner.id, name, secret: runner.secret };
    return { status: 201, body: { runner: runnerJson(runner), encoded_jit_config: Buffer.from(JSON.stringify(config)).toString('base64') } };
  }

  function jobFor(runner: RunnerState): JobState | undefined {
    const scope: GitHubRunnerScope = runner.scope.startsWith('org:')
      ? { kind: 'org', organization: runner.scope.slice('org:'.length) }
      : runner.scope.startsWith('enterprise:')
        ? { kind: 'enterprise', organizations: [...installations.keys()] }
        : { kind: 'repo', repository: runner.scope };
    // A job assigned to a scale set goes to that scale set's runners only, and they take no other.
    const scaleSetId = runner.scaleSetId;
    if (scaleSetId !== undefined) return basics.strays.jobFor(runner.name, [...jobs.values()], (waiting) => scaleSets.jobFor(scaleSetId, [...waiting]));
    const open = [...jobs.values()].filter((j) => !scaleSets.isAssigned(j.id));
    return basics.strays.jobFor(runner.name, open, (waiting) => githubJobFor({ labels: runner.labels, scope }, waiting));
  }

  /** GitHub's `workflow_job` "in_progress" delivery of a job the runner took. */
  function announceStart(job: JobState, runner: RunnerState): void {
    const fields = { jobId: job.id, runId: job.runId, repository: job.repository, labels: job.labels, createdAt: job.createdAt, startedAt: job.startedAt ?? iso() };
    const group = { runnerId: runner.id, runnerName: runner.name, runnerGroupId: runner.runnerGroupId, runnerGroupName: RUNNER_GROUPS.get(runner.runnerGroupId) ?? 'Default' };
    basics.sendHook((secret) => githubWorkflowJobInProgress({ ...fields, ...group }, secret));
  }

  /** A job as the fake runner takes it: what the real job message carries that the fake uses. */
  function jobAnswer(job: JobState): Record<string, unknown> {
    // A container job: the job message's `container` and `services` (image, and the alias the job reaches it by).
    const containers = job.containers
      ? { container: { image: job.containers.image }, services: (job.containers.services ?? []).map((s) => ({ alias: s.alias, image: s.image, command: s.command ?? [] })) }
      : {};
    return { jobId: job.id, seconds: jobSeconds, repository: job.repository, ...(job.script === undefined ? {} : { script: job.script }), ...containers };
  }

  /** The fake runner's side, authenticated with the secret from its JIT config. */
  function runnerSide(req: HttpRequest): HttpAnswer {
    const m = routes.local.exec(req.path);
    if (!m || (req.method !== 'POST' && !(req.method === 'DELETE' && m.groups?.action === 'session'))) return notFound;
    const runner = runners.get(Number(m.groups?.id));
    // A removed registration: the real runner is told its registration was deleted and exits.
    if (!runner) return { status: 404, body: { message: 'runner registration not found (deleted)' } };
    if (authorizationCredential(req.headers) !== runner.secret) return { status: 401, body: { message: 'Bad credentials' } };
    const action = m.groups?.action ?? '';
    if (runner.status === 'online') runner.lastContact = now();
    if (action === 'session') {
      if (req.method === 'DELETE') {
        runner.status = 'offline';
        return { status: 204 };
      }
      if (runner.connected) return { status: 409, body: { message: 'the just-in-time config was already used' } };
      runner.connected = true;
      runner.status = 'online';
      runner.lastContact = now();
      return { status: 200, body: { waitSeconds, pollSeconds } };
    }
    if (!runner.connected || runner.status !== 'online') return { status: 409, body: { message: 'runner has no session' } };
    if (action === 'acquire') {
      if (runner.jobId !== undefined) return { status: 200, body: jobAnswer(jobs.get(runner.jobId)!) };
      if (basics.strays.dies(runner.name)) {
        // Gone before this request arrived: GitHub sees a runner that went silent (offline).
        runner.status = 'offline';
        delete runner.lastContact;
        return { status: 409, body: { message: 'runner has no session' } };
      }
      const job = jobFor(runner);
      if (!job) return { status: 204 };
      job.status = 'in_progress';
      job.runnerName = runner.name;
      job.runnerId = runner.id;
      job.runnerScope = runner.scope;
      job.startedAt = iso();
      runner.busy = true;
      runner.jobId = job.id;
      announceStart(job, runner);
      scaleSets.jobStarted(job, runner);
      return { status: 200, body: jobAnswer(job) };
    }
    const job = jobs.get(Number(m.groups?.job));
    if (!job || job.runnerId !== runner.id) return { status: 404, body: { message: 'job not assigned to this runner' } };
    if (job.status !== 'completed') {
      job.status = 'completed';
      job.conclusion = 'success';
      job.completedAt = iso();
      // GitHub removes a just-in-time runner after its job.
      runners.delete(runner.id);
      scaleSets.jobCompleted(job, runner, 'succeeded');
      basics.jobDone('github', job.id, runner.name);
    }
    return { status: 200, body: {} };
  }

  const server = await startJsonServer(route);
  base = server.url;
  return {
    url: server.url,
    appId,
    organization,
    organizations,
    ...(enterprise ? { enterprise } : {}),
    privateKeyPem: firstApp.privateKeyPem,
    apps: apps.map((a) => ({ appId: a.appId, privateKeyPem: a.privateKeyPem })),
    addJob(repository, labels, runId, options) {
      if (!/^[A-Za-z0-9-]+\/[A-Za-z0-9._-]+$/.test(repository)) throw new Error(`repository "${repository}" is not "owner/repo"`);
      if (runId !== undefined && ![...jobs.values()].some((j) => j.runId === runId && j.repository === repository)) throw new Error(`run ${runId} has no job in ${repository}`);
      const job: JobState = { id: nextJobId++, runId: runId ?? nextRunId++, repository, labels: checkedLabels(labels, 'labels'), status: 'queued', createdAt: iso(), ...(options?.script === undefined ? {} : { script: options.script }), ...(options?.containers ? { containers: options.containers } : {}) };
      jobs.set(job.id, job);
      scaleSets.jobsChanged();
      return publicJob(job);
    },
    jobs: () => {
      markLost();
      return byId(jobs.values(), publicJob);
    },
    runners: () => {
      markLost();
      return byId(runners.values(), (r) => ({ id: r.id, name: r.name, labels: [...r.labels], status: r.status, busy: r.busy, runnerGroupId: r.runnerGroupId }));
    },
    cancelJob: (jobId) => {
      cancelQueued(jobs.get(jobId), jobId);
      scaleSets.jobsChanged();
    },
    recordDelivery(jobId, statusCode) {
      if (!jobs.has(jobId)) throw new Error(`no job ${jobId}`);
      const guid = randomUUID();
      addDelivery(jobId, guid, statusCode, false);
      return guid;
    },
    deliveries: () => [...hookDeliveries].sort((a, b) => b.id - a.id).map(({ jobId: _jobId, ...d }) => d),
    redeliveriesSettled: async () => {
      while (pendingRedeliveries.size > 0) await Promise.allSettled([...pendingRedeliveries]);
    },
    requests: basics.requests,
    setWebhook: basics.setWebhook,
    hooksSettled: basics.hooksSettled,
    setRateLimitRemaining(credential, n, id, organization) {
      if (credential === 'pat') patRemaining = n;
      else for (const a of apps) {
        if (id !== undefined && a.appId !== id) continue;
        if (credential === 'app') a.remaining.app = n;
        else for (const org of a.remaining.installation.keys()) if (organization === undefined || org === organization.toLowerCase()) a.remaining.installation.set(org, n);
      }
    },
    failNext: basics.failNext,
    scaleSets: scaleSets.hooks,
    close: () => server.close(),
  };
}

interface AppState {
  readonly appId: string;
  readonly privateKeyPem: string;
  readonly key: KeyObject;
  /** Its installation on the n-th organisation is `firstInstallation + n`. */
  readonly firstInstallation: number;
  /** What is left of its JWT's budget, and of each installation's (by organisation, lower case). */
  readonly remaining: { app: number; readonly installation: Map<string, number> };
}

/** The budget a request spends: an App's JWT, one of its installations, or the enterprise PAT's user. */
type Budget = { readonly kind: 'app'; readonly app: AppState } | { readonly kind: 'installation'; readonly app: AppState; readonly org: string } | { readonly kind: 'pat' };

function publicJob(j: JobState): GitHubJob {
  return {
    id: j.id,
    runId: j.runId,
    repository: j.repository,
    labels: [...j.labels],
    status: j.status,
    ...(j.conclusion === undefined ? {} : { conclusion: j.conclusion }),
    ...(j.runnerName === undefined ? {} : { runnerName: j.runnerName }),
    createdAt: j.createdAt,
    ...(j.startedAt === undefined ? {} : { startedAt: j.startedAt }),
    ...(j.runnerScope === undefined ? {} : { runnerScope: j.runnerScope }),
  };
}

/** `cancelJob`: a queued job ends as cancelled; a job a runner holds is refused (this server cannot stop a runner). */
function cancelQueued(job: JobState | undefined, jobId: number): void {
  if (!job) throw new Error(`no job ${jobId}`);
  if (job.status !== 'queued') throw new Error(`job ${jobId} is ${job.status}: only a queued job is cancelled here`);
  job.status = 'completed';
  job.conclusion = 'cancelled';
  job.completedAt = new Date().toISOString();
}
