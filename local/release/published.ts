/**
 * The release data of the loopback release server (`npm run local -- --roll`): what GitHub's
 * and GitLab's release APIs publish about the runner, for the versions the run has published
 * so far, so the release resolver (lambdas/runner-release) reads them as it reads the real
 * ones. Each version's files are built into `<dir>/<version>/` (buildLocalRelease) and served
 * under the paths the data names:
 * - `GET /repos/actions/runner/releases`: GitHub's list, newest first, each body with the
 *   `<!-- BEGIN SHA linux-x64 -->` blocks, each asset's `browser_download_url` at
 *   `/github/<version>/actions-runner-linux-<arch>-<version>.tar.gz`;
 * - `GET /api/v4/projects/gitlab-org%2Fgitlab-runner/releases`: GitLab's list, ordered as
 *   GitLab orders it, by `released_at` (newest first), not by version; and `.../permalink/latest`,
 *   the first of that order;
 * - both lists cut to `per_page` as the APIs do (GitHub's default 30, GitLab's 20; at most 100;
 *   a value that is not a whole number from 1 answers 400), so a reader that pages wrong sees it;
 * - `GET /gitlab/v<version>/release.sha256` and `/gitlab/v<version>/binaries/gitlab-runner-linux-<amd64|arm64>`.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { compareVersions, githubRunnerAssetName, Provider, type RunnerReleaseSources } from '../../lambdas/shared/contract';
import { buildLocalRelease, RELEASE_FILES } from './packages';

export interface PublishedLocalRelease {
  readonly version: string;
  readonly publishedAt: Date;
}

const GITLAB_ARCH = { x64: 'amd64', arm64: 'arm64' } as const;
const ARCHES = ['x64', 'arm64'] as const;
/** GitHub's and GitLab's documented maximum of `per_page`; a larger value lists this many. */
const MAX_PER_PAGE = 100;

/** The releases a run has published, and the answers the release server gives about them. */
export class LocalReleases {
  private readonly published: PublishedLocalRelease[] = [];

  constructor(private readonly dir: string) {}

  /** Builds the version's files and lists it from now on (the newest is the highest version, not the last released). */
  publish(version: string, publishedAt = new Date()): void {
    buildLocalRelease(join(this.dir, version), undefined, version);
    this.published.push({ version, publishedAt });
  }

  /** The resolver's sources on a server at `url`. */
  static sources(url: string): RunnerReleaseSources {
    return { githubApi: url, gitlabApi: `${url}/api/v4`, gitlabDownloads: `${url}/gitlab`, timeoutMs: 5_000 };
  }

  /** GitLab's order: the last released first, whatever its version. */
  private byReleasedAt(): PublishedLocalRelease[] {
    return [...this.published].sort((a, b) => b.publishedAt.getTime() - a.publishedAt.getTime());
  }

  private sha(version: string, file: string): string {
    return createHash('sha256').update(readFileSync(join(this.dir, version, file))).digest('hex');
  }

  /** The answer to a request of the release data or a versioned file; undefined for any other path. */
  answer(path: string, baseUrl: string, query = new URLSearchParams()): { status: number; type: string; body: Buffer } | undefined {
    const json = (value: unknown) => ({ status: 200, type: 'application/json', body: Buffer.from(JSON.stringify(value)) });
    const known = (v: string) => this.published.some((r) => r.version === v);
    const page = (list: PublishedLocalRelease[], byDefault: number) => {
      const perPage = Number(query.get('per_page') ?? byDefault);
      return Number.isInteger(perPage) && perPage >= 1 ? list.slice(0, Math.min(perPage, MAX_PER_PAGE)) : undefined;
    };
    const badPage = { status: 400, type: 'application/json', body: Buffer.from(JSON.stringify({ error: 'per_page is invalid' })) };
    if (path === '/repos/actions/runner/releases') {
      const files = RELEASE_FILES[Provider.GITHUB];
      const listed = page([...this.published].sort((a, b) => compareVersions(b.version, a.version)), 30);
      if (!listed) return badPage;
      return json(
        listed
          .map((r) => ({
            tag_name: `v${r.version}`,
            draft: false,
            prerelease: false,
            published_at: r.publishedAt.toISOString(),
            body: ARCHES.map((a) => `<!-- BEGIN SHA linux-${a} -->${this.sha(r.version, files[a])}<!-- END SHA linux-${a} -->`).join('\n'),
            assets: ARCHES.map((a) => ({ name: githubRunnerAssetName(a, r.version), browser_download_url: `${baseUrl}/github/${r.version}/${githubRunnerAssetName(a, r.version)}` })),
          })),
      );
    }
    const gitlabRelease = (r: PublishedLocalRelease) => ({ tag_name: `v${r.version}`, released_at: r.publishedAt.toISOString(), upcoming_release: false });
    if (path === '/api/v4/projects/gitlab-org%2Fgitlab-runner/releases') {
      const listed = page(this.byReleasedAt(), 20);
      return listed ? json(listed.map(gitlabRelease)) : badPage;
    }
    if (path === '/api/v4/projects/gitlab-org%2Fgitlab-runner/releases/permalink/latest') {
      const last = this.byReleasedAt()[0];
      return last ? json(gitlabRelease(last)) : { status: 404, type: 'text/plain', body: Buffer.from('Not Found') };
    }
    let m = /^\/gitlab\/v([^/]+)\/release\.sha256$/.exec(path);
    if (m && known(m[1]!)) {
      const v = m[1]!;
      const lines = ARCHES.map((a) => `${this.sha(v, RELEASE_FILES[Provider.GITLAB][a])}  binaries/gitlab-runner-linux-${GITLAB_ARCH[a]}`);
      return { status: 200, type: 'text/plain', body: Buffer.from(`${lines.join('\n')}\n`) };
    }
    m = /^\/gitlab\/v([^/]+)\/binaries\/gitlab-runner-linux-(amd64|arm64)$/.exec(path);
    if (m && known(m[1]!)) return this.file(m[1]!, RELEASE_FILES[Provider.GITLAB][m[2] === 'amd64' ? 'x64' : 'arm64']);
    m = /^\/github\/([^/]+)\/actions-runner-linux-(x64|arm64)-([^/]+)\.tar\.gz$/.exec(path);
    if (m && m[1] === m[3] && known(m[1]!)) return this.file(m[1]!, RELEASE_FILES[Provider.GITHUB][m[2] as 'x64' | 'arm64']);
    return undefined;
  }

  private file(version: string, name: string) {
    const path = join(this.dir, version, name);
    return existsSync(path) ? { status: 200, type: 'application/octet-stream', body: readFileSync(path) } : undefined;
  }
}
