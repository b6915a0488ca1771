import { createHash } from 'node:crypto';
import { SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { decideRelease } from '../../lambdas/runner-release/decide';
import { createRunnerReleaseHandler } from '../../lambdas/runner-release/handler';
import { AwsCaller } from '../../lambdas/shared/aws-call';
import {
  buildFleetConfig,
  daysUntilRefused,
  decodeRunnerRelease,
  encodeRunnerRelease,
  Provider,
  RUNNER_VERSION_LATEST,
  ssmPaths,
  type FleetConfig,
  type ResolvedRunnerRelease,
} from '../../lambdas/shared/contract';
import { awsError, FakeAws, lostAnswer } from '../support/fake-aws';
import { Lines, PREFIX } from '../support/fixtures';
import { startLoopback, type Loopback } from '../support/loopback';

/** The release resolver against a loopback GitHub API and GitLab release site, SSM faked. */
const NOW = new Date('2026-12-06T12:00:00.000Z');
const paths = ssmPaths(PREFIX);
const sha = (v: string, arch: string) => createHash('sha256').update(`${v}-${arch}`).digest('hex');

interface GithubRelease {
  version: string;
  publishedAt: string;
  draft?: boolean;
  prerelease?: boolean;
  noSha?: 'x64' | 'arm64';
  noAsset?: 'x64' | 'arm64';
}
let github: GithubRelease[] = [];
/** gitlab-runner's releases, listed as GitLab lists them: newest released_at first, per_page of them (default 20, at most 100). */
let gitlab: { version: string; releasedAt: string }[] = [];
const gitlabSums = (v: string) => `${sha(v, 'amd64')}  binaries/gitlab-runner-linux-amd64\n${sha(v, 'arm64')}  binaries/gitlab-runner-linux-arm64\n`;
let down = false;
let server: Loopback;

beforeAll(async () => {
  server = await startLoopback((req) => {
    if (down) return { status: 503, body: 'down' };
    if (req.path.startsWith('/repos/actions/runner/releases')) {
      return {
        status: 200,
        body: github.map((r) => ({
          tag_name: `v${r.version}`,
          draft: r.draft ?? false,
          prerelease: r.prerelease ?? false,
          published_at: r.publishedAt,
          body: (['x64', 'arm64'] as const)
            .filter((a) => a !== r.noSha)
            .map((a) => `<!-- BEGIN SHA linux-${a} -->${sha(r.version, a)}<!-- END SHA linux-${a} -->`)
            .join('\n'),
          assets: (['x64', 'arm64'] as const)
            .filter((a) => a !== r.noAsset)
            .map((a) => ({ name: `actions-runner-linux-${a}-${r.version}.tar.gz`, browser_download_url: `https://github.com/actions/runner/releases/download/v${r.version}/actions-runner-linux-${a}-${r.version}.tar.gz` })),
        })),
      };
    }
    const url = new URL(req.path, 'http://loopback');
    if (url.pathname === '/api/v4/projects/gitlab-org%2Fgitlab-runner/releases') {
      const perPage = Number(url.searchParams.get('per_page') ?? 20);
      if (!Number.isInteger(perPage) || perPage < 1) return { status: 400, body: { error: 'per_page is invalid' } };
      const listed = [...gitlab].sort((a, b) => Date.parse(b.releasedAt) - Date.parse(a.releasedAt)).slice(0, Math.min(perPage, 100));
      return { status: 200, body: listed.map((r) => ({ tag_name: `v${r.version}`, released_at: r.releasedAt })) };
    }
    const sums = /^\/downloads\/v([^/]+)\/release\.sha256$/.exec(url.pathname);
    if (sums && gitlab.some((r) => r.version === sums[1])) return { status: 200, headers: { 'content-type': 'text/plain' }, body: gitlabSums(sums[1]!) };
    return { status: 404, body: 'not found' };
  });
});
afterAll(async () => {
  await server.close();
  aws.restore();
});

let aws: FakeAws;
let lines: Lines;
beforeEach(() => {
  aws?.restore();
  aws = new FakeAws();
  lines = new Lines();
  down = false;
  github = [
    { version: '2.339.0', publishedAt: '2026-11-20T10:00:00Z' },
    { version: '2.340.0-rc1', publishedAt: '2026-12-01T10:00:00Z', prerelease: true },
    { version: '2.338.0', publishedAt: '2026-10-28T10:00:00Z' },
  ];
  gitlab = [
    { version: '19.1.0', releasedAt: '2026-11-22T00:00:00Z' },
    { version: '19.0.1', releasedAt: '2026-11-02T00:00:00Z' },
  ];
});

function config(pools: { name: string; provider: Provider; runnerVersion?: string }[]): FleetConfig {
  return buildFleetConfig({
    prefix: PREFIX,
    github: { appId: '1', organization: 'acme' },
    gitlab: { url: 'https://gitlab.example.com', scopeId: 1, runnerType: 'group_type' as never },
    pools: pools.map((p) => ({ launchTemplateId: 'lt-0123456789abcdef0', launchTemplateVersion: '1', subnetIds: ['subnet-1'], instanceTypes: ['t3.micro'], ...p })),
  } as never);
}

function run(c: FleetConfig) {
  return createRunnerReleaseHandler({
    ssm: new SSMClient({}),
    aws: new AwsCaller({ sleep: async () => {}, timeoutMs: 200 }),
    loadConfig: async () => c,
    sources: { githubApi: server.url, gitlabApi: `${server.url}/api/v4`, gitlabDownloads: `${server.url}/downloads`, timeoutMs: 5_000 },
    now: () => NOW,
    sink: lines.sink,
  })();
}
const stored = (provider: Provider) => {
  const p = aws.parameters.get(paths.runnerRelease(provider));
  return p === undefined ? undefined : (decodeRunnerRelease(p.value) as ResolvedRunnerRelease);
};
const problemsMetric = () => lines.metric('RunnerReleaseProblems');

describe('release resolver', () => {
  const latestGithub = { name: 'linux', provider: Provider.GITHUB, runnerVersion: RUNNER_VERSION_LATEST };
  const latestGitlab = { name: 'gl', provider: Provider.GITLAB, runnerVersion: RUNNER_VERSION_LATEST };

  it('stores the newest published release of each followed provider: version, both URLs and checksums, the date', async () => {
    const summary = await run(config([latestGithub, latestGitlab]));
    expect(stored(Provider.GITHUB)).toEqual({
      version: '2.339.0',
      x64: { url: 'https://github.com/actions/runner/releases/download/v2.339.0/actions-runner-linux-x64-2.339.0.tar.gz', sha256: sha('2.339.0', 'x64') },
      arm64: { url: 'https://github.com/actions/runner/releases/download/v2.339.0/actions-runner-linux-arm64-2.339.0.tar.gz', sha256: sha('2.339.0', 'arm64') },
      publishedAt: '2026-11-20T10:00:00.000Z',
    });
    expect(stored(Provider.GITLAB)).toMatchObject({
      version: '19.1.0',
      x64: { url: `${server.url}/downloads/v19.1.0/binaries/gitlab-runner-linux-amd64`, sha256: sha('19.1.0', 'amd64') },
      arm64: { url: `${server.url}/downloads/v19.1.0/binaries/gitlab-runner-linux-arm64`, sha256: sha('19.1.0', 'arm64') },
    });
    expect(summary.providers).toEqual({ github: { version: '2.339.0', written: true }, gitlab: { version: '19.1.0', written: true } });
    expect(summary.daysLeft).toEqual({ linux: 30 });
    expect(problemsMetric()).toBe(0);
  });

  it('takes GitLab\'s highest version, not the one released last (a backport patch of an older minor)', async () => {
    // 19.0.2 backports a fix to 19.0 after 19.1.0 came out: GitLab lists it first (released_at), permalink/latest names it.
    gitlab.push({ version: '19.0.2', releasedAt: '2026-12-03T00:00:00Z' });
    const summary = await run(config([latestGitlab]));
    expect(stored(Provider.GITLAB)?.version).toBe('19.1.0');
    expect(summary.providers.gitlab).toEqual({ version: '19.1.0', written: true });
    expect(problemsMetric()).toBe(0);
  });

  it('resolves nothing for pinned pools, and publishes the days until GitHub refuses each pin', async () => {
    const summary = await run(config([{ name: 'pinned', provider: Provider.GITHUB, runnerVersion: '2.338.0' }, { name: 'gl', provider: Provider.GITLAB, runnerVersion: '19.0.1' }]));
    expect(aws.parameters.size).toBe(0);
    // 2.339.0 came out 2026-11-20T10:00Z: 2.338.0 is refused from 2026-12-20T10:00Z, 13 whole days after NOW.
    expect(summary.daysLeft).toEqual({ pinned: 13 });
    expect(lines.metric('RunnerDaysLeft', { Pool: 'pinned' })).toBe(13);
  });

  it.each([
    ['the provider is down', () => (down = true), 'unreachable'],
    ['a checksum is missing from the notes', () => (github[0]!.noSha = 'arm64'), 'checksum-missing'],
    ['a tarball is missing from the assets', () => (github[0]!.noAsset = 'x64'), 'download-missing'],
    ['the newest release is older than the stored one', () => (github = [{ version: '2.338.5', publishedAt: '2026-12-02T00:00:00Z' }]), 'version-backwards'],
  ])('keeps the last good release when %s, and counts the problem', async (_name, breakIt, reason) => {
    await run(config([latestGithub]));
    const good = aws.parameters.get(paths.runnerRelease(Provider.GITHUB))!.value;
    breakIt();
    const summary = await run(config([latestGithub]));
    expect(aws.parameters.get(paths.runnerRelease(Provider.GITHUB))!.value).toBe(good);
    expect(summary.providers.github).toEqual({ version: '2.339.0', written: false, problem: reason });
    expect(problemsMetric()).toBe(1);
    expect(lines.logs(/^runner release not resolved/).map((l) => l.reason)).toEqual([reason]);
  });

  it('moves forward when a newer release is published, and not when the same one is read again', async () => {
    await run(config([latestGithub]));
    const puts = aws.count('PutParameter');
    await run(config([latestGithub]));
    expect(aws.count('PutParameter')).toBe(puts);
    github.unshift({ version: '2.340.0', publishedAt: '2026-12-05T00:00:00Z' });
    const summary = await run(config([latestGithub]));
    expect(stored(Provider.GITHUB)?.version).toBe('2.340.0');
    expect(summary.daysLeft).toEqual({ linux: 30 });
  });

  it('a write whose every answer was lost is resolved by reading the parameter back: landed counts as written, not as a problem', async () => {
    aws.fault('PutParameter', ...Array.from({ length: 6 }, () => lostAnswer()));
    const summary = await run(config([latestGithub]));
    expect(aws.count('PutParameter')).toBe(6);
    expect(stored(Provider.GITHUB)?.version).toBe('2.339.0');
    expect(summary.providers.github).toEqual({ version: '2.339.0', written: true });
    expect(problemsMetric()).toBe(0);
    expect(lines.logs('runner release resolved')).toHaveLength(1);
  });

  it('a write that timed out without landing is still a write-failed problem', async () => {
    aws.fault('PutParameter', ...Array.from({ length: 6 }, () => awsError('TimeoutError', 0)));
    const summary = await run(config([latestGithub]));
    expect(stored(Provider.GITHUB)).toBeUndefined();
    expect(summary.providers.github).toMatchObject({ written: false, problem: 'write-failed' });
    expect(problemsMetric()).toBe(1);
  });

  it('writes nothing when the stored release cannot be read (it could move it backwards)', async () => {
    aws.fault('GetParameter', ...Array.from({ length: 6 }, () => awsError('InternalServerError', 500)));
    const summary = await run(config([latestGithub]));
    expect(aws.count('PutParameter')).toBe(0);
    expect(summary.providers.github?.problem).toBe('unreadable-parameter');
    expect(problemsMetric()).toBe(1);
  });
});

describe('decideRelease and the window', () => {
  const release = (version: string, x = sha(version, 'x64')): ResolvedRunnerRelease => ({
    version,
    x64: { url: `https://example.com/${version}/x64`, sha256: x },
    arm64: { url: `https://example.com/${version}/arm64`, sha256: sha(version, 'arm64') },
    publishedAt: '2026-12-01T00:00:00.000Z',
  });
  it('refuses the same version with other checksums, and an invalid release', () => {
    expect(decideRelease(release('1.2.0'), { release: release('1.2.0', sha('other', 'x64')), history: [] })).toMatchObject({ action: 'keep', problem: 'checksum-changed' });
    expect(decideRelease(undefined, { release: { ...release('1.2.0'), x64: { url: 'http://example.com/x', sha256: sha('1.2.0', 'x64') } }, history: [] })).toMatchObject({ action: 'keep', problem: 'invalid' });
    expect(decideRelease(release('1.2.0'), { release: release('1.10.0'), history: [] })).toMatchObject({ action: 'write' });
  });
  it('round-trips the stored form', () => {
    expect(decodeRunnerRelease(encodeRunnerRelease(release('2.339.0')))).toEqual(release('2.339.0'));
    expect(decodeRunnerRelease('2.339.0 https://x')).toHaveProperty('problems');
  });
  it('closes the window 30 days after the first newer release, whatever came later', () => {
    const history = [
      { version: '2.340.0', publishedAt: new Date('2026-12-01T00:00:00Z') },
      { version: '2.339.0', publishedAt: new Date('2026-11-10T00:00:00Z') },
    ];
    expect(daysUntilRefused('2.338.0', history, NOW)).toBe(3);
    expect(daysUntilRefused('2.339.0', history, NOW)).toBe(24);
    expect(daysUntilRefused('2.340.0', history, NOW)).toBe(30);
  });
});
