/**
 * The newest runner release as the providers publish it (docs/control-plane.md, "Runner
 * updates"), read over HTTPS with the Lambda's own bounds:
 * - GitHub: `GET <api>/repos/actions/runner/releases`: the newest release that is neither a
 *   draft nor a prerelease, its SHA-256 per platform from the body's BEGIN SHA blocks, its
 *   tarballs from its assets; the list also dates every release (the 30-day window).
 * - GitLab: `GET <api>/projects/gitlab-org%2Fgitlab-runner/releases?per_page=20` (GitLab's
 *   default page; at most 100), the highest version listed, then
 *   `<downloads>/v<version>/release.sha256` for the binaries' SHA-256. Not `permalink/latest`:
 *   GitLab orders releases by `released_at`, so a backport patch of an older minor released
 *   after the newest minor would be "latest" and move the pools backwards.
 * Nothing here decides whether to keep what was read (decide.ts).
 */
import {
  compareVersions,
  githubRunnerAssetName,
  parseGithubReleaseBody,
  parseSha256Sums,
  Provider,
  PUBLISHED_CHECKSUM_NAMES,
  type PublishedRelease,
  type ResolvedRunnerRelease,
  type RunnerReleaseSources,
} from '../shared/contract';

/** Why a read gave no usable release (each is counted and logged by that name). */
export type ReleaseProblem = 'unreachable' | 'malformed' | 'checksum-missing' | 'download-missing' | 'invalid' | 'version-backwards' | 'checksum-changed' | 'unreadable-parameter';

export type FetchedRelease =
  | { readonly release: ResolvedRunnerRelease; readonly history: readonly PublishedRelease[] }
  | { readonly problem: ReleaseProblem; readonly detail: string; readonly history?: readonly PublishedRelease[] };

export type Fetch = typeof fetch;

const ARCHES = ['x64', 'arm64'] as const;
/** GitLab names the architectures of its binaries so. */
const GITLAB_ARCH = { x64: 'amd64', arm64: 'arm64' } as const;

class ReadError extends Error {}

async function get(fetchFn: Fetch, url: string, sources: RunnerReleaseSources, accept: string): Promise<string> {
  let response: Response;
  try {
    response = await fetchFn(url, { headers: { accept, 'user-agent': 'cdk-warm-runners-release-resolver' }, signal: AbortSignal.timeout(sources.timeoutMs), redirect: 'follow' });
  } catch (error) {
    const e = error as Error & { cause?: { code?: string } };
    throw new ReadError(`GET ${url}: ${e.name}${e.cause?.code ? ` (${e.cause.code})` : ''}`);
  }
  const text = await response.text().catch(() => '');
  if (!response.ok) throw new ReadError(`GET ${url}: HTTP ${response.status}`);
  return text;
}

interface GithubReleaseJson {
  readonly tag_name?: unknown;
  readonly draft?: unknown;
  readonly prerelease?: unknown;
  readonly published_at?: unknown;
  readonly body?: unknown;
  readonly assets?: readonly { readonly name?: unknown; readonly browser_download_url?: unknown }[];
}

const versionOf = (tag: string) => tag.replace(/^v/, '');

/** GitHub's newest release, with the publication dates of the listed ones. */
export async function fetchGithubRelease(sources: RunnerReleaseSources, fetchFn: Fetch = fetch): Promise<FetchedRelease> {
  const url = `${sources.githubApi.replace(/\/+$/, '')}/repos/actions/runner/releases?per_page=30`;
  let list: GithubReleaseJson[];
  try {
    list = JSON.parse(await get(fetchFn, url, sources, 'application/vnd.github+json')) as GithubReleaseJson[];
  } catch (error) {
    return { problem: error instanceof ReadError ? 'unreachable' : 'malformed', detail: (error as Error).message };
  }
  if (!Array.isArray(list)) return { problem: 'malformed', detail: `${url} is not a list of releases` };
  const published = list.filter((r) => r.draft !== true && r.prerelease !== true && typeof r.tag_name === 'string' && typeof r.published_at === 'string');
  const history = published.map((r) => ({ version: versionOf(r.tag_name as string), publishedAt: new Date(r.published_at as string) })).filter((r) => !Number.isNaN(r.publishedAt.getTime()));
  const newest = [...published].sort((a, b) => compareVersions(versionOf(b.tag_name as string), versionOf(a.tag_name as string)))[0];
  if (!newest) return { problem: 'malformed', detail: `${url} lists no published release`, history };
  const version = versionOf(newest.tag_name as string);
  const sums = parseGithubReleaseBody(typeof newest.body === 'string' ? newest.body : '');
  const assets = new Map((newest.assets ?? []).map((a) => [a.name, a.browser_download_url]));
  const download = {} as Record<(typeof ARCHES)[number], { url: string; sha256: string }>;
  for (const arch of ARCHES) {
    const sha256 = sums.get(PUBLISHED_CHECKSUM_NAMES[Provider.GITHUB][arch]);
    if (!sha256) return { problem: 'checksum-missing', detail: `release ${version} publishes no SHA-256 for ${PUBLISHED_CHECKSUM_NAMES[Provider.GITHUB][arch]}`, history };
    const asset = assets.get(githubRunnerAssetName(arch, version));
    if (typeof asset !== 'string') return { problem: 'download-missing', detail: `release ${version} has no asset ${githubRunnerAssetName(arch, version)}`, history };
    download[arch] = { url: asset, sha256 };
  }
  return { release: { version, ...download, publishedAt: new Date(newest.published_at as string).toISOString() }, history };
}

/** How many of gitlab-runner's releases the resolver lists (newest `released_at` first): months of them. */
export const GITLAB_RELEASES_PER_PAGE = 20;

interface GitlabReleaseJson {
  readonly tag_name?: unknown;
  readonly released_at?: unknown;
  readonly upcoming_release?: unknown;
}

/** GitLab's highest released version of gitlab-runner, with the checksums GitLab publishes beside its binaries. */
export async function fetchGitlabRelease(sources: RunnerReleaseSources, fetchFn: Fetch = fetch): Promise<FetchedRelease> {
  const url = `${sources.gitlabApi.replace(/\/+$/, '')}/projects/gitlab-org%2Fgitlab-runner/releases?per_page=${GITLAB_RELEASES_PER_PAGE}`;
  let list: GitlabReleaseJson[];
  try {
    list = JSON.parse(await get(fetchFn, url, sources, 'application/json')) as GitlabReleaseJson[];
  } catch (error) {
    return { problem: error instanceof ReadError ? 'unreachable' : 'malformed', detail: (error as Error).message };
  }
  if (!Array.isArray(list)) return { problem: 'malformed', detail: `${url} is not a list of releases` };
  // Released ones only: an upcoming release (released_at ahead) is not downloadable yet.
  const released = list.filter(
    (r): r is { tag_name: string; released_at: string } =>
      r.upcoming_release !== true && typeof r.tag_name === 'string' && typeof r.released_at === 'string' && !Number.isNaN(Date.parse(r.released_at)),
  );
  const history = released.map((r) => ({ version: versionOf(r.tag_name), publishedAt: new Date(r.released_at) }));
  const latest = [...released].sort((a, b) => compareVersions(versionOf(b.tag_name), versionOf(a.tag_name)))[0];
  if (!latest) return { problem: 'malformed', detail: `${url} lists no released version with a date` };
  const version = versionOf(latest.tag_name);
  const base = `${sources.gitlabDownloads.replace(/\/+$/, '')}/v${encodeURIComponent(version)}`;
  let sums: Map<string, string>;
  try {
    sums = parseSha256Sums(await get(fetchFn, `${base}/release.sha256`, sources, 'text/plain'));
  } catch (error) {
    return { problem: 'unreachable', detail: (error as Error).message, history };
  }
  const download = {} as Record<(typeof ARCHES)[number], { url: string; sha256: string }>;
  for (const arch of ARCHES) {
    const name = PUBLISHED_CHECKSUM_NAMES[Provider.GITLAB][arch];
    const sha256 = sums.get(name);
    if (!sha256) return { problem: 'checksum-missing', detail: `${base}/release.sha256 has no ${name}`, history };
    download[arch] = { url: `${base}/binaries/gitlab-runner-linux-${GITLAB_ARCH[arch]}`, sha256 };
  }
  return { release: { version, ...download, publishedAt: new Date(latest.released_at).toISOString() }, history };
}
