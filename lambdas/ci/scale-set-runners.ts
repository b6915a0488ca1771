import { scaleSetScope, type GitHubConnectionConfig, type PoolConfig } from '../shared/contract';
import { repoScope, runnerIdOf, type Scope } from './github-scopes';

/**
 * Where a scale-set pool's runners are registered, and how their ids are spelled. A scale
 * set's JIT runner is a runner of the scale set's organisation or repository (or enterprise)
 * like any other: GitHub's REST runner list shows it and its REST DELETE removes it, so the
 * sweep, the drain and a rollback treat it as they treat the fleet's other runners, provided
 * its runner-id tag is spelled as `runnerIdOf` spells a REST runner of that scope.
 */

/** The runner-id tag value of the scale set's runner `id` (GitHub's numeric id). */
export function scaleSetRunnerId(github: GitHubConnectionConfig, pool: PoolConfig, id: number): string {
  const scope = scaleSetScope(github, pool);
  const at: Scope = scope.organization !== undefined ? { kind: 'org', org: scope.organization } : repoScope(scope.repository!);
  return runnerIdOf(at, id, github.organization);
}
