import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Provider, runnerPackageProblems } from '../../lambdas/shared/contract';
import { buildLocalRelease, RELEASE_FILES, runnerPackageOf } from '../../local/release/packages';
import { fetchGitlabRelease } from '../../lambdas/runner-release/fetch';
import { LocalReleases } from '../../local/release/published';
import { startReleaseServer, type ReleaseMode, type ReleaseServer } from '../../local/release/server';

/** The local release: packages built from the fake runners, served with their real digests. */
describe('local release server and packages', () => {
  let dir: string;
  let server: ReleaseServer;
  let mode: ReleaseMode = '';
  const requests: string[] = [];
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cwr-release-test-'));
    buildLocalRelease(dir);
    server = await startReleaseServer({ dir, mode: () => mode, onRequest: (path) => requests.push(path) });
  });
  afterAll(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const sha = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
  const get = async (url: string) => {
    const res = await fetch(url);
    return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
  };

  it('pins each package by the digest of what it serves, and a tampered answer has another digest', async () => {
    for (const provider of [Provider.GITHUB, Provider.GITLAB]) {
      const pkg = runnerPackageOf(provider, 'local-1', server.url, dir);
      expect(runnerPackageProblems(pkg)).toEqual([]);
      for (const arch of ['x64', 'arm64'] as const) {
        mode = '';
        const ok = await get(pkg[arch].url);
        expect(ok.status).toBe(200);
        expect(sha(ok.body)).toBe(pkg[arch].sha256);
        mode = 'tamper';
        const tampered = await get(pkg[arch].url);
        expect(tampered.body.length).toBe(ok.body.length);
        expect(sha(tampered.body)).not.toBe(pkg[arch].sha256);
      }
    }
    mode = '';
    expect((await get(`${server.url}/.hidden`)).status).toBe(404);
    expect(requests).toContain(`/${RELEASE_FILES.github.x64}`);
  });

  it('packs the fake runners: run.sh and config.sh in the GitHub tarball, a gitlab-runner that answers --version', () => {
    const listing = execFileSync('tar', ['-tvzf', join(dir, RELEASE_FILES.github.x64)], { encoding: 'utf8' });
    expect(listing).toMatch(/^-rwxr-xr-x .* \.\/run\.sh$/m);
    expect(listing).toMatch(/^-rwxr-xr-x .* \.\/config\.sh$/m);
    expect(readFileSync(join(dir, RELEASE_FILES.github.x64)).equals(readFileSync(join(dir, RELEASE_FILES.github.arm64)))).toBe(false);
    const version = execFileSync(join(dir, RELEASE_FILES.gitlab.x64), ['--version'], { encoding: 'utf8' });
    expect(version).toMatch(/^Version: +0\.0\.0-local-fake$/m);
  });
});

/** The release data it serves for the roll-over run: listed as GitHub and GitLab list it. */
describe('local release data', () => {
  let dir: string;
  let server: ReleaseServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cwr-release-data-test-'));
    const published = new LocalReleases(dir);
    // 1.0.1 backports a fix to 1.0 after 1.1.0 came out.
    published.publish('1.0.0', new Date('2026-10-01T00:00:00Z'));
    published.publish('1.1.0', new Date('2026-11-01T00:00:00Z'));
    published.publish('1.0.1', new Date('2026-11-20T00:00:00Z'));
    server = await startReleaseServer({ dir, releases: published });
  });
  afterAll(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const list = async (path: string) => {
    const res = await fetch(`${server.url}${path}`);
    return { status: res.status, body: (await res.json()) as { tag_name: string }[] };
  };
  const gitlabList = '/api/v4/projects/gitlab-org%2Fgitlab-runner/releases';

  it("orders GitLab's list and permalink/latest by released_at as GitLab does; the resolver still takes the highest version", async () => {
    expect((await list(gitlabList)).body.map((r) => r.tag_name)).toEqual(['v1.0.1', 'v1.1.0', 'v1.0.0']);
    expect((await list(`${gitlabList}/permalink/latest`)).body).toMatchObject({ tag_name: 'v1.0.1' });
    const fetched = await fetchGitlabRelease(LocalReleases.sources(server.url));
    expect('release' in fetched && fetched.release.version).toBe('1.1.0');
  });

  it('cuts both lists to per_page (at most 100) and refuses a per_page that is not a whole number from 1', async () => {
    for (const path of [gitlabList, '/repos/actions/runner/releases']) {
      expect((await list(`${path}?per_page=2`)).body).toHaveLength(2);
      expect((await list(`${path}?per_page=500`)).body).toHaveLength(3);
      for (const bad of ['0', '-1', 'x', '1.5']) expect((await list(`${path}?per_page=${bad}`)).status, `${path} per_page=${bad}`).toBe(400);
    }
  });
});
