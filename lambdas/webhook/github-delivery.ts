import { Provider, type GitHubConnectionConfig, type PoolConfig } from '../shared/contract';
import { poolsServing } from '../shared/match-pool';
import { ignore, invalid, isObject, isoTime, jobStartOf, nonEmptyString, positiveInteger, type Classified } from './delivery';

/**
 * Classifies a verified GitHub delivery: `workflow_job` with `action: queued` becomes a job,
 * everything else (ping, other events, other actions, repositories this fleet does not
 * serve) is acknowledged and ignored; a `workflow_job` missing the fields a job needs is invalid.
 */
export function classifyGitHubDelivery(event: string, payload: unknown, github: GitHubConnectionConfig | undefined, pools: readonly PoolConfig[]): Classified {
  if (!isObject(payload)) return invalid('the payload is not a JSON object');
  if (event === 'ping') return ignore('ping');
  if (event !== 'workflow_job') return ignore('event-not-workflow_job');
  const action = nonEmptyString(payload.action);
  if (!action) return invalid('workflow_job payload lacks "action"');
  const job = payload.workflow_job;
  const repo = payload.repository;
  if (!isObject(job)) return invalid('workflow_job payload lacks "workflow_job"');
  if (!isObject(repo)) return invalid('workflow_job payload lacks "repository"');
  const id = positiveInteger(job.id);
  if (id === undefined) return invalid('"workflow_job.id" must be a positive integer');
  const labels = job.labels;
  if (!Array.isArray(labels) || !labels.every((l) => typeof l === 'string' && l !== '')) {
    return invalid('"workflow_job.labels" must be a list of non-empty strings');
  }
  const name = nonEmptyString(repo.name);
  const owner = isObject(repo.owner) ? nonEmptyString(repo.owner.login) : undefined;
  if (!name || !owner) return invalid('"repository.name" and "repository.owner.login" are required');
  if (action === 'in_progress') {
    const runnerName = nonEmptyString(job.runner_name) ?? '';
    const start = jobStartOf({ provider: Provider.GITHUB, providerJobId: String(id), createdAt: job.created_at, startedAt: job.started_at, runnerName, labels: labels as string[] });
    return ignore('action-in_progress', start);
  }
  if (action !== 'queued') return ignore(`action-${action === 'waiting' || action === 'completed' ? action : 'other'}`);
  if (!github) return ignore('no-github-connection');
  if (!servesRepository(github, pools, owner, name)) return ignore('repository-not-served');
  const createdAt = isoTime(job.created_at);
  return { kind: 'job', job: { provider: Provider.GITHUB, providerJobId: String(id), owner, project: name, labels: labels as string[], ...(createdAt ? { createdAt } : {}) } };
}

/**
 * Whether any GitHub pool takes jobs of `owner/repo`: a pool of an organisation serves its
 * repositories, a pool of repositories those listed (each pool's own scope, or the connection's).
 */
export function servesRepository(github: GitHubConnectionConfig, pools: readonly PoolConfig[], owner: string, repo: string): boolean {
  return poolsServing({ github, pools }, Provider.GITHUB, owner, repo).length > 0;
}
