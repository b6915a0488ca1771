import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { main, parseGithubReleaseBody, parseSha256Sums } from '../../bin/check-runner-pins';
import { type RunnerPackage } from '../../lambdas/shared/contract';
import { startLoopback, type Loopback } from '../support/loopback';
import { GH, GL, githubBody, gitlabSums, matching, OTHER, publisher, sha, type Published } from '../support/runner-publisher';

const repo = join(__dirname, '..', '..');
let servers: Loopback[] = [];
afterEach(async () => {
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
});

async function run(published: Published, ...extra: string[]) {
  const server = await publisher(published);
  servers.push(server);
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(['--github-api', server.url, '--gitlab-downloads', server.url, ...extra], {}, (l) => out.push(l), (l) => err.push(l));
  return { code, out, err, server };
}

describe('parsers', () => {
  it('reads only the marked block of each platform from a GitHub release body', () => {
    const sums = parseGithubReleaseBody(`${githubBody('2.1.0', GH.x64.sha256, GH.arm64.sha256)}\nsome other hash ${OTHER} in the notes`);
    expect(sums.get('linux-x64')).toBe(GH.x64.sha256);
    expect(sums.get('linux-arm64')).toBe(GH.arm64.sha256);
    expect(sums.get('win-x64')).toBe(OTHER);
  });

  it('reads sha256sum lines with text, binary (*) and ./ forms', () => {
    const sums = parseSha256Sums(`${GL.x64.sha256}  binaries/gitlab-runner-linux-amd64\r\n${GL.arm64.sha256} *./binaries/gitlab-runner-linux-arm64\nnot a line\n`);
    expect(sums.get('binaries/gitlab-runner-linux-amd64')).toBe(GL.x64.sha256);
    expect(sums.get('binaries/gitlab-runner-linux-arm64')).toBe(GL.arm64.sha256);
    expect(sums.size).toBe(2);
  });
});

describe('check-runner-pins against a loopback publisher', () => {
  it('exits 0 with one ok line per default file when both publishers agree', async () => {
    const { code, out, err, server } = await run(matching());
    expect(err).toEqual([]);
    expect(code).toBe(0);
    expect(out.filter((l) => l.startsWith('ok '))).toEqual([
      `ok default github ${GH.version} x64 ${GH.x64.sha256}`,
      `ok default github ${GH.version} arm64 ${GH.arm64.sha256}`,
      `ok default gitlab ${GL.version} x64 ${GL.x64.sha256}`,
      `ok default gitlab ${GL.version} arm64 ${GL.arm64.sha256}`,
    ]);
    expect(server.requests.map((r) => r.path).sort()).toEqual([`/repos/actions/runner/releases/tags/v${GH.version}`, `/v${GL.version}/release.sha256`]);
    expect(server.requests.every((r) => r.headers['user-agent'])).toBe(true);
  });

  it('names each mismatching file with both digests and exits 1', async () => {
    const published = matching();
    published.gitlab[GL.version] = gitlabSums(OTHER, GL.arm64.sha256);
    const { code, err } = await run(published);
    expect(code).toBe(1);
    expect(err).toContain(`MISMATCH default gitlab ${GL.version} x64: pinned ${GL.x64.sha256}, published ${OTHER} (${servers[0]!.url}/v${GL.version}/release.sha256)`);
    expect(err.filter((l) => /^(MISMATCH|MISSING|UNREACHABLE)/.test(l))).toHaveLength(1);
  });

  it('reports a platform the publisher does not list as missing', async () => {
    const published = matching();
    published.github[GH.version] = { body: githubBody(GH.version, undefined, GH.arm64.sha256) };
    published.gitlab[GL.version] = gitlabSums(GL.x64.sha256, undefined);
    const { code, err } = await run(published);
    expect(code).toBe(1);
    expect(err).toEqual(
      expect.arrayContaining([
        expect.stringMatching(new RegExp(`^MISSING default github ${GH.version} x64: .* publishes no SHA-256 for linux-x64$`)),
        expect.stringMatching(new RegExp(`^MISSING default gitlab ${GL.version} arm64: .* publishes no SHA-256 for binaries/gitlab-runner-linux-arm64$`)),
      ]),
    );
  });

  it('reports an unknown release (404) and a closed port as unreachable, each once', async () => {
    const published = matching();
    delete published.github[GH.version];
    const closed = await startLoopback(() => ({ status: 200 }));
    await closed.close();
    const { code, err } = await run(published, '--gitlab-downloads', closed.url);
    expect(code).toBe(1);
    expect(err.filter((l) => l.startsWith('UNREACHABLE'))).toEqual([
      expect.stringMatching(new RegExp(`^UNREACHABLE default github ${GH.version}: GET .*/releases/tags/v${GH.version}: HTTP 404$`)),
      expect.stringMatching(new RegExp(`^UNREACHABLE default gitlab ${GL.version}: GET ${closed.url}/v${GL.version}/release.sha256: .*ECONNREFUSED`)),
    ]);
  });

  it('checks a pool override against the release of its own version', async () => {
    const override: RunnerPackage = {
      version: '2.339.0',
      x64: { url: 'https://mirror.example.com/x64.tar.gz', sha256: sha('override x64') },
      arm64: { url: 'https://mirror.example.com/arm64.tar.gz', sha256: sha('override arm64') },
    };
    const published = matching();
    published.github['2.339.0'] = { body: githubBody('2.339.0', override.x64.sha256, OTHER) };
    const dir = mkdtempSync(join(tmpdir(), 'pins-'));
    writeFileSync(join(dir, 'pool.json'), JSON.stringify(override));
    const { code, out, err } = await run(published, '--github-package', join(dir, 'pool.json'));
    expect(code).toBe(1);
    expect(out).toContain(`ok override github 2.339.0 x64 ${override.x64.sha256}`);
    expect(err).toContain(`MISMATCH override github 2.339.0 arm64: pinned ${override.arm64.sha256}, published ${OTHER} (${servers[0]!.url}/repos/actions/runner/releases/tags/v2.339.0)`);
  });

  it('refuses an invalid override and a bad flag with a usage error', async () => {
    const bad = await run(matching(), '--gitlab-package', '{"version":"1","x64":{"url":"ftp://x","sha256":"aaaa"}}');
    expect(bad.code).toBe(2);
    expect(bad.err.join('\n')).toMatch(/--gitlab-package\.x64\.url "ftp:\/\/x" must use https[^]*--gitlab-package\.arm64 is missing[^]*usage: cdk-warm-runners-check-pins/);
    expect(bad.server.requests).toEqual([]);
    expect((await run(matching(), '--bogus')).code).toBe(2);
  });

  it('runs as npm run check-runner-pins with the base URLs from the environment', async () => {
    const server = await publisher(matching());
    servers.push(server);
    const { stdout } = await promisify(execFile)(process.execPath, [join(repo, 'node_modules', 'tsx', 'dist', 'cli.mjs'), join(repo, 'bin', 'check-runner-pins.ts')], {
      cwd: repo,
      env: { ...process.env, RUNNER_PINS_GITHUB_API: server.url, RUNNER_PINS_GITLAB_DOWNLOADS: server.url },
    });
    expect(stdout).toContain('check-runner-pins: all 4 pinned checksums match');
    const failing = matching();
    failing.gitlab = {};
    const down = await publisher(failing);
    servers.push(down);
    const child = promisify(execFile)(process.execPath, [join(repo, 'node_modules', 'tsx', 'dist', 'cli.mjs'), join(repo, 'bin', 'check-runner-pins.ts')], {
      cwd: repo,
      env: { ...process.env, RUNNER_PINS_GITHUB_API: down.url, RUNNER_PINS_GITLAB_DOWNLOADS: down.url },
    });
    await expect(child).rejects.toMatchObject({ code: 1, stderr: expect.stringContaining(`UNREACHABLE default gitlab ${GL.version}`) });
  });
});
