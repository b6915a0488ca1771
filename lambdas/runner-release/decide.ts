import { compareVersions, runnerReleaseProblems, type ResolvedRunnerRelease } from '../shared/contract';
import type { FetchedRelease, ReleaseProblem } from './fetch';

/**
 * What to do with what was read, against what the parameter holds (the last good release):
 * - `write`: a valid release newer than the stored one (or the first one);
 * - `keep`: the same release again, or a problem: the last good one stays in place, and a
 *   problem is counted and raised (`problem`), never written.
 * A release that goes backwards (a yanked release, a mirror that lags) or the same version
 * with other checksums (a release re-uploaded, or a tampered source) disagrees with what the
 * instances already installed: it is refused until an operator looks.
 */
export type ReleaseDecision =
  | { readonly action: 'write'; readonly release: ResolvedRunnerRelease }
  | { readonly action: 'keep'; readonly problem?: ReleaseProblem; readonly detail?: string };

export function decideRelease(stored: ResolvedRunnerRelease | undefined, fetched: FetchedRelease): ReleaseDecision {
  if ('problem' in fetched) return { action: 'keep', problem: fetched.problem, detail: fetched.detail };
  const found = fetched.release;
  const problems = runnerReleaseProblems(found);
  if (problems.length > 0) return { action: 'keep', problem: 'invalid', detail: problems.join('; ') };
  if (!stored) return { action: 'write', release: found };
  const order = compareVersions(found.version, stored.version);
  if (order < 0) return { action: 'keep', problem: 'version-backwards', detail: `the newest published release ${found.version} is older than the stored ${stored.version}` };
  if (order > 0) return { action: 'write', release: found };
  for (const arch of ['x64', 'arm64'] as const) {
    if (found[arch].sha256 !== stored[arch].sha256) {
      return { action: 'keep', problem: 'checksum-changed', detail: `release ${found.version} ${arch} now publishes SHA-256 ${found[arch].sha256}, the stored one is ${stored[arch].sha256}` };
    }
  }
  return { action: 'keep' };
}
