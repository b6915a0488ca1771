import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Provider, type RunnerPackage } from '../../lambdas/shared/contract';

/**
 * The runner packages of the loopback release server (helpers.bash build_release), with their
 * real digests; without a release directory (static checks) a URL nothing answers and the
 * digests of the file names, which are never fetched.
 */
export function sandboxRunnerPackage(provider: Provider, release = 'http://127.0.0.1:9', releaseDir?: string): RunnerPackage {
  const download = (file: string): { url: string; sha256: string } => {
    const path = releaseDir ? join(releaseDir, file) : '';
    const bytes = path && existsSync(path) ? readFileSync(path) : Buffer.from(file);
    return { url: `${release}/${file}`, sha256: createHash('sha256').update(bytes).digest('hex') };
  };
  return {
    version: 'sandbox-1',
    x64: download(provider === Provider.GITHUB ? 'github-x64.tar.gz' : 'gitlab-x64'),
    arm64: download(provider === Provider.GITHUB ? 'github-arm64.tar.gz' : 'gitlab-arm64'),
  };
}
