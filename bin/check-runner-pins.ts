#!/usr/bin/env node
/**
 * Checks the pinned runner checksums against what GitHub and GitLab publish (docs/operations.md,
 * "Upgrading"):
 *
 *   npx cdk-warm-runners-check-pins [--github-package FILE|JSON] [--gitlab-package FILE|JSON]
 *     [--github-api URL] [--gitlab-downloads URL] [--timeout-ms N]
 *
 * (the package's executable, dist/bin/check-runner-pins.js; in a checkout: `npm run check-runner-pins -- ...`).
 *
 * Without a package flag it checks DEFAULT_RUNNER_PACKAGES; a flag adds a pool's `runnerPackage`
 * override (a JSON file or inline JSON of { version, x64: { url, sha256 }, arm64: {...} }), checked
 * against the published release of its own version. Sources:
 * - GitHub: `GET <api>/repos/actions/runner/releases/tags/v<version>`; the release body carries
 *   `<!-- BEGIN SHA linux-x64 --><sha256><!-- END SHA linux-x64 -->` per platform (the markers of
 *   actions/runner's releaseNote.md template).
 * - GitLab: `<downloads>/v<version>/release.sha256`, sha256sum lines such as
 *   `<sha256>  binaries/gitlab-runner-linux-amd64`.
 * Base URLs also come from RUNNER_PINS_GITHUB_API and RUNNER_PINS_GITLAB_DOWNLOADS (a test points
 * them at a loopback server). Prints one line per file; exits 1 on any mismatch, missing entry or
 * unreachable source, 2 on a usage error.
 */
import { existsSync, readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import {
  DEFAULT_RUNNER_PACKAGES,
  DEFAULT_RUNNER_RELEASE_SOURCES,
  parseGithubReleaseBody,
  parseSha256Sums,
  Provider,
  PUBLISHED_CHECKSUM_NAMES,
  runnerPackageProblems,
  type RunnerPackage,
} from '../lambdas/shared/contract';

// The parsers live in the contract (the release resolver reads the same data); re-exported for the tests.
export { parseGithubReleaseBody, parseSha256Sums };

export const DEFAULT_GITHUB_API = DEFAULT_RUNNER_RELEASE_SOURCES.githubApi;
export const DEFAULT_GITLAB_DOWNLOADS = DEFAULT_RUNNER_RELEASE_SOURCES.gitlabDownloads;
const DEFAULT_TIMEOUT_MS = 20_000;

const USAGE = `usage: cdk-warm-runners-check-pins [--github-package FILE|JSON] [--gitlab-package FILE|JSON]
       [--github-api URL] [--gitlab-downloads URL] [--timeout-ms N]
(in a checkout of the repository: npm run check-runner-pins -- ...)`;

type Arch = 'x64' | 'arm64';
const ARCHES: readonly Arch[] = ['x64', 'arm64'];

/** One package to check: whose it is, and where it came from (the defaults or a flag). */
export interface PinToCheck {
  readonly provider: Provider;
  readonly label: string;
  readonly pkg: RunnerPackage;
}

export interface PinSources {
  readonly githubApi: string;
  readonly gitlabDownloads: string;
  readonly timeoutMs: number;
}

export type PinStatus = 'ok' | 'mismatch' | 'missing' | 'unreachable';

export interface PinResult {
  readonly status: PinStatus;
  readonly line: string;
}

/** The published SHA-256 per platform name, or why it could not be had. */
type Published = { readonly sums: ReadonlyMap<string, string>; readonly source: string } | { readonly error: string; readonly source: string };

async function fetchText(url: string, timeoutMs: number, accept: string): Promise<string> {
  const response = await fetch(url, {
    headers: { accept, 'user-agent': 'cdk-warm-runners-check-runner-pins' },
    signal: AbortSignal.timeout(timeoutMs),
    redirect: 'follow',
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  return text;
}

function describeError(error: unknown): string {
  const e = error as Error & { cause?: { code?: string; message?: string } };
  const cause = e.cause?.code ?? e.cause?.message;
  return cause ? `${e.message} (${cause})` : e.message;
}

async function fetchPublished(provider: Provider, version: string, sources: PinSources): Promise<Published> {
  const base = (provider === Provider.GITHUB ? sources.githubApi : sources.gitlabDownloads).replace(/\/+$/, '');
  const source =
    provider === Provider.GITHUB
      ? `${base}/repos/actions/runner/releases/tags/v${encodeURIComponent(version)}`
      : `${base}/v${encodeURIComponent(version)}/release.sha256`;
  try {
    if (provider === Provider.GITLAB) {
      return { sums: parseSha256Sums(await fetchText(source, sources.timeoutMs, 'text/plain')), source };
    }
    const release = JSON.parse(await fetchText(source, sources.timeoutMs, 'application/vnd.github+json')) as { body?: unknown };
    if (typeof release.body !== 'string') return { error: 'the release has no body', source };
    return { sums: parseGithubReleaseBody(release.body), source };
  } catch (error) {
    return { error: describeError(error), source };
  }
}

/** Compares each package with the published checksums, one result per file (or per unreachable release). */
export async function checkRunnerPins(pins: readonly PinToCheck[], sources: PinSources): Promise<PinResult[]> {
  const cache = new Map<string, Promise<Published>>();
  const results: PinResult[] = [];
  for (const { provider, label, pkg } of pins) {
    const key = `${provider} ${pkg.version}`;
    if (!cache.has(key)) cache.set(key, fetchPublished(provider, pkg.version, sources));
    const published = await cache.get(key)!;
    const what = `${label} ${provider} ${pkg.version}`;
    if ('error' in published) {
      results.push({ status: 'unreachable', line: `UNREACHABLE ${what}: GET ${published.source}: ${published.error}` });
      continue;
    }
    for (const arch of ARCHES) {
      const name = PUBLISHED_CHECKSUM_NAMES[provider][arch];
      const pinned = pkg[arch].sha256;
      const expected = published.sums.get(name);
      if (expected === undefined) {
        results.push({ status: 'missing', line: `MISSING ${what} ${arch}: ${published.source} publishes no SHA-256 for ${name}` });
      } else if (expected !== pinned) {
        results.push({ status: 'mismatch', line: `MISMATCH ${what} ${arch}: pinned ${pinned}, published ${expected} (${published.source})` });
      } else {
        results.push({ status: 'ok', line: `ok ${what} ${arch} ${pinned}` });
      }
    }
  }
  return results;
}

class UsageError extends Error {}

function readPackage(flag: string, value: string): RunnerPackage {
  const text = value.trimStart().startsWith('{') ? value : existsSync(value) ? readFileSync(value, 'utf8') : undefined;
  if (text === undefined) throw new UsageError(`${flag} "${value}" is neither inline JSON nor a readable file`);
  let pkg: RunnerPackage;
  try {
    pkg = JSON.parse(text) as RunnerPackage;
  } catch (error) {
    throw new UsageError(`${flag}: not JSON: ${(error as Error).message}`);
  }
  const problems = runnerPackageProblems(pkg, flag);
  if (problems.length > 0) throw new UsageError(problems.join('\n'));
  return pkg;
}

/** The packages and sources the command line and environment ask for. */
export function parseCommandLine(argv: string[], env: NodeJS.ProcessEnv): { pins: PinToCheck[]; sources: PinSources } {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        'github-package': { type: 'string' },
        'gitlab-package': { type: 'string' },
        'github-api': { type: 'string' },
        'gitlab-downloads': { type: 'string' },
        'timeout-ms': { type: 'string' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const timeoutMs = Number(values['timeout-ms'] ?? DEFAULT_TIMEOUT_MS);
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0) throw new UsageError(`--timeout-ms "${values['timeout-ms']}" must be a positive whole number of milliseconds`);
  const pins: PinToCheck[] = [
    { provider: Provider.GITHUB, label: 'default', pkg: DEFAULT_RUNNER_PACKAGES[Provider.GITHUB] },
    { provider: Provider.GITLAB, label: 'default', pkg: DEFAULT_RUNNER_PACKAGES[Provider.GITLAB] },
  ];
  if (values['github-package'] !== undefined) pins.push({ provider: Provider.GITHUB, label: 'override', pkg: readPackage('--github-package', values['github-package']) });
  if (values['gitlab-package'] !== undefined) pins.push({ provider: Provider.GITLAB, label: 'override', pkg: readPackage('--gitlab-package', values['gitlab-package']) });
  const sources: PinSources = {
    githubApi: values['github-api'] ?? env.RUNNER_PINS_GITHUB_API ?? DEFAULT_GITHUB_API,
    gitlabDownloads: values['gitlab-downloads'] ?? env.RUNNER_PINS_GITLAB_DOWNLOADS ?? DEFAULT_GITLAB_DOWNLOADS,
    timeoutMs,
  };
  for (const [flag, url] of [['--github-api', sources.githubApi], ['--gitlab-downloads', sources.gitlabDownloads]] as const) {
    if (!URL.canParse(url) || !/^https?:$/.test(new URL(url).protocol)) throw new UsageError(`${flag} "${url}" must be an http(s) URL`);
  }
  return { pins, sources };
}

/** Runs the check and returns the exit code: 0 all match, 1 any problem, 2 a usage error. */
export async function main(argv: string[], env: NodeJS.ProcessEnv, out: (line: string) => void, err: (line: string) => void): Promise<number> {
  let parsed;
  try {
    parsed = parseCommandLine(argv, env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    err(`check-runner-pins: ${error.message}\n${USAGE}`);
    return 2;
  }
  const results = await checkRunnerPins(parsed.pins, parsed.sources);
  for (const r of results) (r.status === 'ok' ? out : err)(r.line);
  const bad = results.filter((r) => r.status !== 'ok').length;
  if (bad > 0) {
    err(`check-runner-pins: ${bad} problem(s): fix the pin from the publisher's own page, never from this output alone (docs/operations.md, "Upgrading")`);
    return 1;
  }
  out(`check-runner-pins: all ${results.length} pinned checksums match what GitHub and GitLab publish`);
  return 0;
}

if (require.main === module) {
  void main(
    process.argv.slice(2),
    process.env,
    (line) => process.stdout.write(`${line}\n`),
    (line) => process.stderr.write(`${line}\n`),
  ).then((code) => {
    process.exitCode = code;
  });
}
