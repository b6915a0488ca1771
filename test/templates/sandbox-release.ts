import { Provider, type RunnerPackage } from '../../lambdas/shared/contract';
import { runnerPackageOf } from '../../local/release/packages';

/**
 * The runner packages of the loopback release server (helpers.bash build_release, the file
 * names of local/release/packages.ts), with their real digests; without a release directory
 * (static checks) a URL nothing answers and the digests of the file names, which are never fetched.
 */
export function sandboxRunnerPackage(provider: Provider, release = 'http://127.0.0.1:9', releaseDir?: string): RunnerPackage {
  return runnerPackageOf(provider, 'sandbox-1', release, releaseDir);
}
