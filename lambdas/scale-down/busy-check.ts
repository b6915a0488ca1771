import { errorName, withTimeout } from '../shared/aws-call';
import type { CiProvider } from '../shared/contract';

/** What the provider says of a runner just before its idle deregistration. */
export type ProviderBusy = { readonly busy: false } | { readonly busy: true; readonly why: 'running-job' | 'unknown'; readonly error?: string };

/**
 * Asks the provider directly whether the runner runs a job (`CiProvider.runnerBusy`, GitLab's
 * running-jobs list), the last reading before an idle runner's DELETE: GitLab accepts the DELETE
 * of a working runner and its listing has no busy flag, so neither refuses for us. A provider
 * without the signal (GitHub: its listing's `busy`, and it refuses to delete a busy runner) is
 * not asked. A failed or timed-out answer counts as busy: unknown is not idle.
 */
export async function busyAtProvider(ci: CiProvider, runnerId: string, timeoutMs: number): Promise<ProviderBusy> {
  if (!ci.runnerBusy) return { busy: false };
  try {
    return (await withTimeout('runnerBusy', timeoutMs, () => ci.runnerBusy!(runnerId))) ? { busy: true, why: 'running-job' } : { busy: false };
  } catch (error) {
    return { busy: true, why: 'unknown', error: errorName(error) };
  }
}
