/**
 * A pool that follows the newest runner release (docs/operations.md, "Runner updates"): the
 * release-resolver Lambda reads the providers' release data on a schedule, checks it and keeps
 * the newest good release in one String parameter per provider (`ssmPaths().runnerRelease`);
 * the boot of such a pool reads it at install time, the pool Lambda replaces parked instances
 * whose `runnerVersion` tag names another version. The published data's formats are parsed
 * here once, for the resolver and for `check-runner-pins`.
 */
import { Provider } from './boot';
import { runnerPackageProblems, type RunnerPackage } from './runner-packages';

/** A pool's `runnerVersion` in the FleetConfig when it follows the newest release; a pinned pool carries its pinned version. */
export const RUNNER_VERSION_LATEST = 'latest';

/**
 * GitHub refuses a runner more than 30 days behind the newest release ("Runner version vX is
 * deprecated and cannot receive messages"), even one that would update itself: GitHub Docs,
 * "Self-hosted runners" reference, "Runner software updates on self-hosted runners". The
 * window of a version closes 30 days after the first release newer than it was published.
 */
export const GITHUB_RUNNER_WINDOW_DAYS = 30;

/** The pin alarm fires when a pinned (or stuck) GitHub runner has this many days or fewer left. */
export const RUNNER_PIN_WARN_DAYS = 7;

/**
 * The release alarm fires when this many hourly runs in a row failed or were refused. One
 * failure pages no one: a GitHub or GitLab 5xx or timeout usually passes within the hour, and
 * the last good release stays in use meanwhile (the 30-day window leaves weeks). The runs do not
 * retry instead: three tries of three reads bounded by 10 s each would not fit the function's
 * 60 s, an outage of minutes outlasts a backoff of seconds, and GitHub's unauthenticated API
 * allows 60 requests an hour per address, which Lambda's addresses share.
 */
export const RUNNER_RELEASE_ALARM_HOURS = 2;

/** Where the release resolver reads the providers' release data (LAMBDA_ENV.runnerReleaseSources, as JSON). */
export interface RunnerReleaseSources {
  /** GitHub's REST API. */
  readonly githubApi: string;
  /** GitLab's REST API (`.../api/v4`), where the gitlab-runner project's releases are listed. */
  readonly gitlabApi: string;
  /** Where GitLab publishes the gitlab-runner binaries and their `release.sha256`. */
  readonly gitlabDownloads: string;
  /** Bound of each request. */
  readonly timeoutMs: number;
}

export const DEFAULT_RUNNER_RELEASE_SOURCES: RunnerReleaseSources = {
  githubApi: 'https://api.github.com',
  gitlabApi: 'https://gitlab.com/api/v4',
  gitlabDownloads: 'https://gitlab-runner-downloads.s3.amazonaws.com',
  timeoutMs: 10_000,
};

/** The resolved release as the parameter holds it: the package plus when the provider published it. */
export interface ResolvedRunnerRelease extends RunnerPackage {
  /** When the provider published the release (ISO 8601). */
  readonly publishedAt: string;
}

type Arch = 'x64' | 'arm64';

/**
 * The parameter's value: one line of space-separated fields (a URL holds no space, a digest is
 * hex), so that the boot script reads it with one `read` and no JSON parser:
 * `<version> <x64 url> <x64 sha256> <arm64 url> <arm64 sha256> <published-at>`.
 */
export function encodeRunnerRelease(r: ResolvedRunnerRelease): string {
  return [r.version, r.x64.url, r.x64.sha256, r.arm64.url, r.arm64.sha256, r.publishedAt].join(' ');
}

/** The release a parameter value holds, or the problems that make it unusable. */
export function decodeRunnerRelease(text: string): ResolvedRunnerRelease | { readonly problems: string[] } {
  const f = text.trim().split(/\s+/);
  if (f.length !== 6) return { problems: [`a resolved runner release has 6 fields, got ${f.length}`] };
  const [version, x64Url, x64Sha, arm64Url, arm64Sha, publishedAt] = f as [string, string, string, string, string, string];
  const release: ResolvedRunnerRelease = { version, x64: { url: x64Url, sha256: x64Sha }, arm64: { url: arm64Url, sha256: arm64Sha }, publishedAt };
  const problems = runnerReleaseProblems(release);
  return problems.length ? { problems } : release;
}

/** What makes a resolved release unusable (empty when the boot may install it). */
export function runnerReleaseProblems(r: ResolvedRunnerRelease): string[] {
  const problems = runnerPackageProblems(r, 'release');
  if (Number.isNaN(Date.parse(r.publishedAt))) problems.push(`release.publishedAt "${r.publishedAt}" is not a date`);
  return problems;
}

/**
 * Orders release versions: numeric dot-separated parts compared as numbers, a leading "v"
 * ignored, a non-numeric part compared as text. Negative when `a` is older.
 */
export function compareVersions(a: string, b: string): number {
  const parts = (v: string) => v.replace(/^v/, '').split(/[.+-]/);
  const pa = parts(a);
  const pb = parts(b);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const x = pa[i] ?? '0';
    const y = pb[i] ?? '0';
    const nx = /^\d+$/.test(x) ? Number(x) : NaN;
    const ny = /^\d+$/.test(y) ? Number(y) : NaN;
    const d = !Number.isNaN(nx) && !Number.isNaN(ny) ? nx - ny : x.localeCompare(y);
    if (d !== 0) return Math.sign(d);
  }
  return 0;
}

/** The platform names each provider publishes a checksum under, per architecture. */
export const PUBLISHED_CHECKSUM_NAMES: Readonly<Record<Provider, Readonly<Record<Arch, string>>>> = {
  [Provider.GITHUB]: { x64: 'linux-x64', arm64: 'linux-arm64' },
  [Provider.GITLAB]: { x64: 'binaries/gitlab-runner-linux-amd64', arm64: 'binaries/gitlab-runner-linux-arm64' },
};

/**
 * The `<!-- BEGIN SHA <platform> -->...<!-- END SHA <platform> -->` blocks of a GitHub runner
 * release body (the markers of actions/runner's releaseNote.md template).
 */
export function parseGithubReleaseBody(body: string): Map<string, string> {
  const sums = new Map<string, string>();
  for (const m of body.matchAll(/<!--\s*BEGIN SHA ([\w.-]+)\s*-->\s*([0-9a-fA-F]{64})\s*<!--\s*END SHA \1\s*-->/g)) {
    sums.set(m[1]!, m[2]!.toLowerCase());
  }
  return sums;
}

/** The lines of a GitLab `release.sha256` (sha256sum output: `<hex>  [*][./]<path>`). */
export function parseSha256Sums(text: string): Map<string, string> {
  const sums = new Map<string, string>();
  for (const line of text.split(/\r?\n/)) {
    const m = /^([0-9a-fA-F]{64})\s+\*?(?:\.\/)?(\S+)\s*$/.exec(line.trim());
    if (m) sums.set(m[2]!, m[1]!.toLowerCase());
  }
  return sums;
}

/** The GitHub release asset of one architecture (`actions-runner-linux-x64-2.338.0.tar.gz`). */
export function githubRunnerAssetName(arch: Arch, version: string): string {
  return `actions-runner-linux-${arch}-${version}.tar.gz`;
}

/** A published release as the release lists give it. */
export interface PublishedRelease {
  readonly version: string;
  readonly publishedAt: Date;
}

/**
 * Whole days until GitHub refuses runner `version`: 30 days after the first release newer than
 * it was published (the earliest such publication among `releases`), counted from `now`;
 * `GITHUB_RUNNER_WINDOW_DAYS` when no newer release is known. Negative: refused already.
 */
export function daysUntilRefused(version: string, releases: readonly PublishedRelease[], now: Date): number {
  const newer = releases.filter((r) => compareVersions(r.version, version) > 0).map((r) => r.publishedAt.getTime());
  if (newer.length === 0) return GITHUB_RUNNER_WINDOW_DAYS;
  const closes = Math.min(...newer) + GITHUB_RUNNER_WINDOW_DAYS * 86_400_000;
  return Math.floor((closes - now.getTime()) / 86_400_000);
}
