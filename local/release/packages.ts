/**
 * The runner packages a loopback release server serves: small but real, one file per provider
 * and architecture, named as RELEASE_FILES says, and pinned by their real SHA-256
 * (`runnerPackageOf`), so the install step (templates/install-runner.sh) fetches, checks and
 * installs them as it would the published releases.
 */
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Provider, type RunnerPackage } from '../../lambdas/shared/contract';
import { DEFAULT_RUNNER_DIR } from '../instances/machine';

export const RELEASE_FILES: Readonly<Record<Provider, { readonly x64: string; readonly arm64: string }>> = {
  [Provider.GITHUB]: { x64: 'github-x64.tar.gz', arm64: 'github-arm64.tar.gz' },
  [Provider.GITLAB]: { x64: 'gitlab-x64', arm64: 'gitlab-arm64' },
};

/**
 * The provider's package as a pool's `runnerPackage`: URLs on `baseUrl`, digests of the files
 * in `dir`. Without a file (a rendering that is never booted) the digest is the file name's,
 * never fetched.
 */
export function runnerPackageOf(provider: Provider, version: string, baseUrl: string, dir?: string): RunnerPackage {
  const download = (file: string): { url: string; sha256: string } => {
    const path = dir ? join(dir, file) : '';
    const bytes = path && existsSync(path) ? readFileSync(path) : Buffer.from(file);
    return { url: `${baseUrl}/${file}`, sha256: createHash('sha256').update(bytes).digest('hex') };
  };
  const files = RELEASE_FILES[provider];
  return { version, x64: download(files.x64), arm64: download(files.arm64) };
}

/**
 * Builds the packages of `npm run local` into `dir` from the fake runners: per architecture a
 * GitHub tarball (the fake run.sh, a config.sh, an ARCH file) and a GitLab binary (the fake
 * gitlab-runner, which answers --version), each unlike the other architecture's.
 */
export function buildLocalRelease(dir: string, runnerSource = DEFAULT_RUNNER_DIR, version?: string): void {
  mkdirSync(dir, { recursive: true });
  for (const arch of ['x64', 'arm64'] as const) {
    const tree = mkdtempSync(join(dir, '.tree-'));
    try {
      // The tarball's "." entry: unpacked, it is the runner directory, which the runner user must enter.
      chmodSync(tree, 0o755);
      copyFileSync(join(runnerSource, 'run.sh'), join(tree, 'run.sh'));
      // The JIT config needs no config.sh, but the install step checks that one is there.
      writeFileSync(join(tree, 'config.sh'), '#!/bin/bash\necho "config.sh is not needed with --jitconfig" >&2\n');
      for (const f of ['run.sh', 'config.sh']) chmodSync(join(tree, f), 0o755);
      writeFileSync(join(tree, 'ARCH'), `${arch}\n`);
      // Each published version's files differ (their own digests), as real releases do.
      if (version) writeFileSync(join(tree, 'VERSION'), `${version}\n`);
      execFileSync('tar', ['-czf', join(dir, RELEASE_FILES[Provider.GITHUB][arch]), '-C', tree, '.']);
    } finally {
      rmSync(tree, { recursive: true, force: true });
    }
    writeFileSync(join(dir, RELEASE_FILES[Provider.GITLAB][arch]), `${readFileSync(join(runnerSource, 'gitlab-runner'), 'utf8')}# ${arch}${version ? ` ${version}` : ''}\n`, { mode: 0o755 });
  }
}
