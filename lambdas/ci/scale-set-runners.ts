import { githubPoolScope, type GitHubConnectionConfig, type PoolConfig } from '../shared/contract';
import { repoScope, runnerIdOf, type Scope } from './github-scopes';

/**
 * Where a scale-set pool's runners are registered, and how their ids are spelled. A scale
 * set's JIT runner is a runner of the scale set's organisation or repository (or enterprise)
 * like any other: GitHub's REST runner list shows it and its REST DELETE removes it, so the
 * sweep, the drain and a rollback treat it as they treat the fleet's other runners, provided
 * its runner-id tag is spelled as `runnerIdOf` spells a REST runner of that scope.
 */

/** The scope of a scale-set pool: its enterprise, its organisation, or its one repository. */
export function scaleSetScope(github: GitHubConnectionConfig, pool: PoolConfig): Scope {
  const scope = githubPoolScope(github, pool);
  if (scope.enterprise !== undefined) return { kind: 'enterprise', enterprise: scope.enterprise };
  if (scope.organization !== undefined) return { kind: 'org', org: scope.organization };
  if (scope.repositories.length === 1) return repoScope(scope.repositories[0]!.toLowerCase());
  throw new Error(`pool "${pool.name}" is a scale set but names ${scope.repositories.length} repositories: a scale set lives in one organisation or one repository`);
}

/** The runner-id tag value of the scale set's runner `id` (GitHub's numeric id). */
export function scaleSetRunnerId(github: GitHubConnectionConfig, pool: PoolConfig, id: number): string {
  return runnerIdOf(scaleSetScope(github, pool), id, github.organization);
}
