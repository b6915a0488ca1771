import { gitLabPoolsForProject, Provider, type GitLabConnectionConfig, type PoolConfig } from '../shared/contract';
import { ignore, invalid, isObject, isoTime, jobStartOf, nonEmptyString, positiveInteger, type Classified } from './delivery';

/**
 * Classifies a verified GitLab delivery: a Job Hook (`object_kind: build`) with
 * `build_status: pending` is a job waiting for a runner; other statuses and other hooks are
 * acknowledged and ignored. The payload does not carry the job's tags; the handler looks
 * them up. Fields follow the documented Job Hook example (user/project/integrations/webhook_events.md).
 * A job of a project the fleet's runners cannot serve is acknowledged and ignored.
 */
export function classifyGitLabDelivery(payload: unknown, gitlab?: GitLabConnectionConfig, pools?: readonly PoolConfig[]): Classified {
  if (!isObject(payload)) return invalid('the payload is not a JSON object');
  const kind = nonEmptyString(payload.object_kind) ?? nonEmptyString(payload.event_name);
  if (!kind) return invalid('the payload has no "object_kind"');
  if (kind !== 'build') return ignore('not-a-job-hook');
  const status = nonEmptyString(payload.build_status);
  if (!status) return invalid('Job Hook lacks "build_status"');
  const buildId = positiveInteger(payload.build_id);
  if (buildId === undefined) return invalid('"build_id" must be a positive integer');
  const project = isObject(payload.project) ? payload.project : undefined;
  const projectId = positiveInteger(payload.project_id) ?? positiveInteger(project?.id);
  if (projectId === undefined) return invalid('"project_id" must be a positive integer');
  const path = nonEmptyString(project?.path_with_namespace) ?? nonEmptyString(payload.project_name);
  if (!path) return invalid('"project.path_with_namespace" is required');
  if (status === 'running') return ignore('status-running', runningJob(payload, buildId));
  if (status !== 'pending') return ignore(`status-${/^[a-z_]{1,32}$/.test(status) ? status : 'other'}`);
  const slash = path.lastIndexOf('/');
  const owner = slash > 0 ? path.slice(0, slash) : path;
  const name = slash > 0 ? path.slice(slash + 1) : path;
  if (!name) return invalid('"project.path_with_namespace" must be "namespace/project"');
  if (gitlab && !servesProject(gitlab, projectId, pools)) return ignore('project-not-served');
  // `build_created_at` was "2021-02-23 02:41:37 UTC" in older releases; `_iso` came later.
  const createdAt = isoTime(payload.build_created_at_iso, payload.build_created_at);
  return { kind: 'job', job: { provider: Provider.GITLAB, providerJobId: String(buildId), owner, project: name, projectId, labels: [], ...(createdAt ? { createdAt } : {}) } };
}

/**
 * Whether one of the fleet's GitLab pools can take a job of this project (contract
 * gitlab-scope.ts, `poolServesProject`). A project runner only serves its own project, so any
 * other project's job would wait forever for the runner we started. A Job Hook names the project
 * but not its group ancestry, so group runners cannot be checked here: the hook must be the
 * group's own (docs/gitlab.md). Instance runners serve every project. Without `pools`: the
 * connection's scope alone.
 */
export function servesProject(gitlab: GitLabConnectionConfig, projectId: number, pools: readonly Pick<PoolConfig, 'provider' | 'gitlabGroupId' | 'gitlabProjectId'>[] = [{ provider: Provider.GITLAB }]): boolean {
  return gitLabPoolsForProject(gitlab, pools, projectId).length > 0;
}

/** A running job's start, with its runner's description and tags (the Job Hook's `runner` object). */
function runningJob(payload: Record<string, unknown>, buildId: number) {
  const runner = isObject(payload.runner) ? payload.runner : {};
  const tags = Array.isArray(runner.tags) ? runner.tags.filter((t): t is string => typeof t === 'string' && t !== '') : [];
  const runnerName = nonEmptyString(runner.description) ?? '';
  return jobStartOf({ provider: Provider.GITLAB, providerJobId: String(buildId), createdAt: payload.build_created_at_iso ?? payload.build_created_at, startedAt: payload.build_started_at_iso ?? payload.build_started_at, runnerName, labels: tags });
}
