import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import examples from '@octokit/webhooks-examples';
import type { LambdaFunctionURLEvent } from 'aws-lambda';

/**
 * Webhook deliveries as GitHub and GitLab send them, wrapped in the event a Lambda Function
 * URL hands its function (payload format 2.0). The bodies start from the services'
 * published examples: GitHub's `workflow_job` "queued" example from @octokit/webhooks-examples
 * and GitLab's documented Job Hook example (test/webhook/fixtures/gitlab-job-hook.json), with
 * the job's id, repository or project and labels filled in.
 */

export interface Delivery {
  /** Function URL path: /github or /gitlab. */
  readonly path: '/github' | '/gitlab';
  readonly headers: Record<string, string>;
  /** The raw bytes the sender signed. */
  readonly body: string;
  /** The delivery id the service would show in its delivery log. */
  readonly deliveryId: string;
}

type QueuedExample = { action: string; workflow_job: Record<string, unknown>; repository: Record<string, unknown> } & Record<string, unknown>;

const queuedExample: QueuedExample = (() => {
  const workflowJob = examples.find((e) => e.name === 'workflow_job');
  const queued = (workflowJob?.examples as unknown as QueuedExample[] | undefined)?.find((e) => e.action === 'queued');
  if (!queued) throw new Error('@octokit/webhooks-examples has no queued workflow_job example');
  return queued;
})();

const inProgressExample: QueuedExample = (() => {
  const workflowJob = examples.find((e) => e.name === 'workflow_job');
  const started = (workflowJob?.examples as unknown as QueuedExample[] | undefined)?.find((e) => e.action === 'in_progress');
  if (!started) throw new Error('@octokit/webhooks-examples has no in_progress workflow_job example');
  return started;
})();

const jobHookExample: Record<string, unknown> = JSON.parse(
  readFileSync(join(__dirname, '..', 'test', 'webhook', 'fixtures', 'gitlab-job-hook.json'), 'utf8'),
) as Record<string, unknown>;

export interface GitHubJobFields {
  readonly jobId: number;
  readonly runId: number;
  /** "owner/repo" */
  readonly repository: string;
  /** As the workflow's `runs-on` gives them, e.g. ["self-hosted", "linux", "x64"]. */
  readonly labels: readonly string[];
}

/** Now, to the second, as both providers write their times. */
const isoSeconds = (): string => new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');

/** A signed `workflow_job` delivery with `action: queued`. `secret` is the webhook secret (HMAC-SHA256 key). */
export function githubWorkflowJobQueued(job: GitHubJobFields, secret: string, deliveryId: string = randomUUID()): Delivery {
  const [owner, name] = job.repository.split('/') as [string, string];
  const repo = queuedExample.repository;
  const payload = {
    ...queuedExample,
    workflow_job: {
      ...queuedExample.workflow_job,
      id: job.jobId,
      run_id: job.runId,
      labels: [...job.labels],
      status: 'queued',
      // Created now, as a live delivery's job is: the example's 2023 time would make every
      // local job a late delivery (scale-up asks the provider about those first).
      created_at: isoSeconds(),
      started_at: null,
      runner_id: null,
      runner_name: null,
      runner_group_id: null,
      runner_group_name: null,
      run_url: `https://api.github.com/repos/${job.repository}/actions/runs/${job.runId}`,
      url: `https://api.github.com/repos/${job.repository}/actions/jobs/${job.jobId}`,
    },
    repository: { ...repo, name, full_name: job.repository, owner: { ...(repo.owner as Record<string, unknown>), login: owner } },
  };
  return signedWorkflowJob(payload, secret, deliveryId);
}

/** A `workflow_job` delivery of `payload`, signed with `secret` (X-Hub-Signature-256, HMAC-SHA256 of the raw body). */
function signedWorkflowJob(payload: unknown, secret: string, deliveryId: string): Delivery {
  const body = JSON.stringify(payload);
  return {
    path: '/github',
    deliveryId,
    body,
    headers: {
      'content-type': 'application/json',
      'user-agent': 'GitHub-Hookshot/local',
      'x-github-event': 'workflow_job',
      'x-github-delivery': deliveryId,
      'x-github-hook-id': '1',
      'x-hub-signature-256': `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`,
    },
  };
}

/** A job as a runner took it: when the provider created and started it, and the runner's record. */
export interface JobStartFields {
  /** ISO 8601. */
  readonly createdAt: string;
  readonly startedAt: string;
  readonly runnerId: number;
  /** GitHub: the runner's name; GitLab: its description. Both carry the instance id. */
  readonly runnerName: string;
}

/**
 * A signed `workflow_job` delivery with `action: in_progress`: a runner took the job. Built
 * on GitHub's published in_progress example; GitHub sends it for every job, the fleet's
 * webhook stamps the ledger's job-started stage from it (started_at less created_at).
 */
export function githubWorkflowJobInProgress(job: GitHubJobFields & JobStartFields & { readonly runnerGroupId: number; readonly runnerGroupName: string }, secret: string, deliveryId: string = randomUUID()): Delivery {
  const [owner, name] = job.repository.split('/') as [string, string];
  const repo = queuedExample.repository;
  const payload = {
    ...queuedExample,
    ...inProgressExample,
    action: 'in_progress',
    workflow_job: {
      ...queuedExample.workflow_job,
      ...inProgressExample.workflow_job,
      id: job.jobId,
      run_id: job.runId,
      labels: [...job.labels],
      status: 'in_progress',
      created_at: job.createdAt,
      started_at: job.startedAt,
      runner_id: job.runnerId,
      runner_name: job.runnerName,
      runner_group_id: job.runnerGroupId,
      runner_group_name: job.runnerGroupName,
      run_url: `https://api.github.com/repos/${job.repository}/actions/runs/${job.runId}`,
      url: `https://api.github.com/repos/${job.repository}/actions/jobs/${job.jobId}`,
    },
    repository: { ...repo, name, full_name: job.repository, owner: { ...(repo.owner as Record<string, unknown>), login: owner } },
  };
  return signedWorkflowJob(payload, secret, deliveryId);
}

export interface GitLabJobFields {
  readonly buildId: number;
  readonly projectId: number;
  /** "namespace/project" */
  readonly projectPath: string;
}

/**
 * A Job Hook delivery with `build_status: pending` (the job waits for a runner; GitLab's
 * payload carries no tags, the webhook looks them up). `token` goes into X-Gitlab-Token;
 * `Idempotency-Key` is what GitLab 17.4+ sends, the same on every retry of one delivery.
 */
export function gitlabJobPending(job: GitLabJobFields, token: string, deliveryId: string = randomUUID()): Delivery {
  const project = (jobHookExample.project ?? {}) as Record<string, unknown>;
  const payload = {
    ...jobHookExample,
    build_id: job.buildId,
    build_status: 'pending',
    build_created_at: isoSeconds(),
    build_created_at_iso: isoSeconds(),
    build_started_at: null,
    build_finished_at: null,
    project_id: job.projectId,
    project_name: job.projectPath,
    project: { ...project, id: job.projectId, path_with_namespace: job.projectPath },
    runner: null,
  };
  return jobHook(payload, token, deliveryId);
}

/** A Job Hook delivery of `payload`: the secret token in X-Gitlab-Token, the delivery's Idempotency-Key. */
function jobHook(payload: unknown, token: string, deliveryId: string): Delivery {
  const body = JSON.stringify(payload);
  return {
    path: '/gitlab',
    deliveryId,
    body,
    headers: {
      'content-type': 'application/json',
      'user-agent': 'GitLab/18.6.0',
      'x-gitlab-event': 'Job Hook',
      'x-gitlab-token': token,
      'x-gitlab-event-uuid': randomUUID(),
      'idempotency-key': deliveryId,
    },
  };
}

/**
 * A Job Hook delivery with `build_status: running`: a runner took the job. The payload names
 * the runner (its `runner` object: id, description, type, tags) and the job's times as the documented example writes them
 * (`build_*_at` ISO 8601 with milliseconds, `build_*_at_iso` to the second).
 */
export function gitlabJobRunning(
  job: GitLabJobFields & JobStartFields & { readonly runnerType: string; readonly runnerTags: readonly string[] },
  token: string,
  deliveryId: string = randomUUID(),
): Delivery {
  const project = (jobHookExample.project ?? {}) as Record<string, unknown>;
  const ms = (t: string) => new Date(t).toISOString();
  const iso = (t: string) => ms(t).replace(/\.\d{3}Z$/, 'Z');
  const payload = {
    ...jobHookExample,
    build_id: job.buildId,
    build_status: 'running',
    build_created_at: ms(job.createdAt),
    build_created_at_iso: iso(job.createdAt),
    build_started_at: ms(job.startedAt),
    build_started_at_iso: iso(job.startedAt),
    build_finished_at: null,
    build_finished_at_iso: null,
    build_duration: null,
    build_queued_duration: (Date.parse(job.startedAt) - Date.parse(job.createdAt)) / 1000,
    build_failure_reason: 'unknown_failure',
    project_id: job.projectId,
    project_name: job.projectPath,
    project: { ...project, id: job.projectId, path_with_namespace: job.projectPath },
    runner: { active: true, runner_type: job.runnerType, is_shared: job.runnerType === 'instance_type', id: job.runnerId, description: job.runnerName, tags: [...job.runnerTags] },
  };
  return jobHook(payload, token, deliveryId);
}

/** The same delivery with its signature (GitHub) or token (GitLab) replaced by a wrong one. */
export function withBadSignature(delivery: Delivery): Delivery {
  const headers = { ...delivery.headers };
  if (delivery.path === '/github') headers['x-hub-signature-256'] = `sha256=${createHmac('sha256', 'not-the-secret').update(delivery.body).digest('hex')}`;
  else headers['x-gitlab-token'] = `wrong-${randomBytes(8).toString('hex')}`;
  return { ...delivery, headers };
}

/** What a Function URL passes its function for a POST of `delivery` (payload format 2.0). */
export function functionUrlEvent(delivery: Delivery, now: Date = new Date()): LambdaFunctionURLEvent {
  const requestId = randomUUID();
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: delivery.path,
    rawQueryString: '',
    // Function URLs deliver header names in lower case.
    headers: Object.fromEntries(Object.entries(delivery.headers).map(([k, v]) => [k.toLowerCase(), v])),
    requestContext: {
      accountId: 'anonymous',
      apiId: 'local',
      domainName: 'local.lambda-url.us-east-1.on.aws',
      domainPrefix: 'local',
      http: { method: 'POST', path: delivery.path, protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: delivery.headers['user-agent'] ?? 'local' },
      requestId,
      routeKey: '$default',
      stage: '$default',
      time: now.toUTCString(),
      timeEpoch: now.getTime(),
    },
    body: delivery.body,
    isBase64Encoded: false,
  };
}
