import { GITHUB_SELF_HOSTED_LABEL } from '../../lambdas/shared/match-pool';

/**
 * Which waiting job a runner gets, as the CI services decide it: pure functions over the jobs
 * the loopback servers hold. "Oldest" is the lowest id: both services number jobs in the order
 * they were created. A job may land on another runner than the one launched for it; the
 * control plane must cope with that, so the loopback servers must do it too.
 */

/** Where a GitHub runner is registered: the organisation, or one repository ("owner/repo"). */
export type GitHubRunnerScope =
  | { readonly kind: 'org'; readonly organization: string }
  | { readonly kind: 'repo'; readonly repository: string }
  /** An enterprise's runner: jobs of its organisations (`organizations`, lower case). */
  | { readonly kind: 'enterprise'; readonly organizations: readonly string[] };

export interface GitHubCandidate {
  readonly id: number;
  /** "owner/repo". */
  readonly repository: string;
  readonly labels: readonly string[];
  readonly status: string;
}

/**
 * GitHub: the oldest queued job in the runner's scope whose every label is one of the
 * runner's (labels compare case-insensitively; every self-hosted runner has `self-hosted`).
 */
export function githubJobFor<J extends GitHubCandidate>(runner: { readonly labels: readonly string[]; readonly scope: GitHubRunnerScope }, jobs: Iterable<J>): J | undefined {
  const has = new Set([GITHUB_SELF_HOSTED_LABEL, ...runner.labels.map((l) => l.toLowerCase())]);
  const scope = runner.scope;
  const owner = (repository: string) => repository.split('/')[0]?.toLowerCase() ?? '';
  const inScope = (repository: string) =>
    scope.kind === 'org'
      ? owner(repository) === scope.organization.toLowerCase()
      : scope.kind === 'enterprise'
        ? scope.organizations.includes(owner(repository))
        : repository.toLowerCase() === scope.repository.toLowerCase();
  return oldest([...jobs].filter((j) => j.status === 'queued' && inScope(j.repository) && j.labels.every((l) => has.has(l.toLowerCase()))));
}

export interface GitLabCandidate {
  readonly id: number;
  readonly projectId: number;
  readonly tags: readonly string[];
  readonly status: string;
}

/**
 * GitLab: the oldest pending job the runner may take: a project runner only its project's
 * jobs; a tagged job only when the runner has all its tags; an untagged job only when the
 * runner runs untagged jobs.
 */
export function gitlabJobFor<J extends GitLabCandidate>(
  runner: { readonly tagList: readonly string[]; readonly runUntagged: boolean; readonly projectId?: number },
  jobs: Iterable<J>,
): J | undefined {
  const tags = new Set(runner.tagList);
  return oldest(
    [...jobs].filter(
      (j) =>
        j.status === 'pending' &&
        (runner.projectId === undefined || j.projectId === runner.projectId) &&
        (j.tags.length === 0 ? runner.runUntagged : j.tags.every((t) => tags.has(t))),
    ),
  );
}

function oldest<J extends { readonly id: number }>(jobs: J[]): J | undefined {
  return jobs.reduce<J | undefined>((best, j) => (best === undefined || j.id < best.id ? j : best), undefined);
}
