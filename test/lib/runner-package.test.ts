import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { WarmRunners, decodeUserData } from '../../lib';
import {
  DEFAULT_RUNNER_PACKAGES,
  PROVIDERS,
  Provider,
  RUNNER_OS_PACKAGES,
  checksumProblem,
  runnerPackageProblems,
  type RunnerPackage,
} from '../../lambdas/shared/contract';
import { INSTALL_STANDALONE_MARKER, renderInstallScript, renderStartLogic, renderUserData } from '../../lib/user-data';

const REAL_LOOKING = 'af4b794c1bc41d73d40535e3fe092a39f9679cd8d965954c2aca25a05ca41d32';
const mirror: RunnerPackage = {
  version: '2.339.0',
  x64: { url: 'https://mirror.example.com/actions-runner-linux-x64-2.339.0.tar.gz', sha256: '3f1e2d4c5b6a79880f1e2d3c4b5a69788f9e0d1c2b3a49586f7e8d9c0b1a2938' },
  arm64: { url: 'https://mirror.example.com/actions-runner-linux-arm64-2.339.0.tar.gz', sha256: 'c0ffee12ab34cd56ef7890a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5' },
};

describe('the pinned runner packages (contract)', () => {
  it.each(PROVIDERS)('%s: a real release, pinned by https URL and a plausible SHA-256 per architecture', (provider) => {
    const pkg = DEFAULT_RUNNER_PACKAGES[provider];
    expect(runnerPackageProblems(pkg)).toEqual([]);
    for (const arch of ['x64', 'arm64'] as const) {
      expect(pkg[arch].url).toMatch(/^https:\/\//);
      // The URL names the pinned version: a bump cannot change one without the other.
      expect(pkg[arch].url).toContain(`v${pkg.version}/`);
    }
    expect(pkg.x64.sha256).not.toBe(pkg.arm64.sha256);
  });

  it('pins GitHub 2.338.0 with the digests of its release notes', () => {
    const gh = DEFAULT_RUNNER_PACKAGES[Provider.GITHUB];
    expect(gh.version).toBe('2.338.0');
    expect(gh.x64.url).toBe('https://github.com/actions/runner/releases/download/v2.338.0/actions-runner-linux-x64-2.338.0.tar.gz');
    expect(gh.x64.sha256).toBe('af4b794c1bc41d73d40535e3fe092a39f9679cd8d965954c2aca25a05ca41d32');
    expect(gh.arm64.sha256).toBe('628b4a7258487b80c1d3c221095a7ded349f5ae0175fd3dfab708d07428f041b');
  });

  it('records each default pin with its source and the date it was looked up', () => {
    const source = readFileSync(join(__dirname, '..', '..', 'lambdas', 'shared', 'contract', 'runner-packages.ts'), 'utf8');
    expect(source).toContain('https://github.com/actions/runner/releases/tag/v2.338.0');
    expect(source).toMatch(/GitLab 19\.0\.1[\s\S]*looked up 2026-12-02/);
  });

  it.each([
    ['all zero', '0'.repeat(64)],
    ['one character', 'a'.repeat(64)],
    ['a repeated block', 'deadbeef'.repeat(8)],
    ['a repeated counting block', '0123456789abcdef'.repeat(4)],
    ['few distinct digits', '0101010101010101010101010101010101010101010101010101010101010f0f'],
    ['upper case', REAL_LOOKING.toUpperCase()],
    ['63 digits', REAL_LOOKING.slice(1)],
    ['a word', 'TODO'],
    ['empty', ''],
  ])('refuses a placeholder checksum: %s', (_what, value) => {
    expect(checksumProblem('x', value)).toMatch(/x/);
  });

  it('accepts a real digest', () => {
    expect(checksumProblem('x', REAL_LOOKING)).toBeUndefined();
    expect(checksumProblem('x', '628b4a7258487b80c1d3c221095a7ded349f5ae0175fd3dfab708d07428f041b')).toBeUndefined();
  });

  it('refuses plain http except to a loopback test server, and names the field and the fix', () => {
    const withUrl = (url: string): RunnerPackage => ({ ...mirror, x64: { ...mirror.x64, url } });
    expect(runnerPackageProblems(withUrl('http://mirror.example.com/r.tar.gz'))).toEqual([
      'runnerPackage.x64.url "http://mirror.example.com/r.tar.gz" must use https (http is accepted only for a loopback test server such as http://127.0.0.1:8080/...)',
    ]);
    expect(runnerPackageProblems(withUrl('ftp://mirror.example.com/r.tar.gz'))[0]).toMatch(/must use https/);
    // A credential in the URL would sit in the launch template's user data and in the boot log.
    for (const url of [
      'https://user:s3cr3t@artifacts.example.com/r.tar.gz',
      'https://bucket.s3.amazonaws.com/r.tar.gz?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20261202&X-Amz-Signature=abc',
      'https://bucket.s3.amazonaws.com/r.tar.gz?X-Amz-Security-Token=FwoG',
      'https://gitlab.example.com/api/v4/projects/1/packages/generic/r/1/r?private_token=glpat-x',
    ]) {
      expect(runnerPackageProblems(withUrl(url))[0], url).toMatch(/must not carry credentials/);
    }
    expect(runnerPackageProblems(withUrl('https://mirror.example.com/r.tar.gz?version=2'))).toEqual([]);
    expect(runnerPackageProblems(withUrl('https://mirror.example.com/r .tar.gz'))[0]).toMatch(/without spaces or quotes/);
    expect(runnerPackageProblems(withUrl('not a url'))[0]).toMatch(/must be an absolute URL/);
    expect(runnerPackageProblems(withUrl('http://127.0.0.1:8080/r.tar.gz'))).toEqual([]);
    expect(runnerPackageProblems(withUrl('http://localhost:8080/r.tar.gz'))).toEqual([]);
  });

  it('refuses a missing architecture, a bad version and one digest for two files', () => {
    const { arm64: _, ...x64Only } = mirror;
    expect(runnerPackageProblems(x64Only as RunnerPackage)).toEqual([
      'runnerPackage.arm64 is missing: give { url, sha256 } for every architecture (repeat one if the pool never uses the other)',
    ]);
    expect(runnerPackageProblems({ ...mirror, version: 'v 2' })[0]).toMatch(/runnerPackage\.version "v 2" must be a release version/);
    expect(runnerPackageProblems({ ...mirror, arm64: { ...mirror.arm64, sha256: mirror.x64.sha256 } })).toEqual([
      'runnerPackage: x64 and arm64 have the same sha256 for different URLs; each architecture\'s file has its own digest',
    ]);
  });
});

describe('rendering the install step', () => {
  it.each(PROVIDERS)('%s: the start logic embeds the same install step the standalone script runs (one source)', (provider) => {
    const standalone = renderInstallScript({ provider });
    expect(standalone.startsWith('#!/bin/bash\n')).toBe(true);
    expect(standalone).not.toMatch(/@@[A-Z0-9_]+@@/);
    // The runner, then Docker where the rendering asks for it (install_docker returns at once otherwise).
    expect(standalone.trimEnd().endsWith('install_runner\ninstall_docker')).toBe(true);
    expect(standalone).not.toContain(INSTALL_STANDALONE_MARKER);
    // Everything before the standalone entry (its own log and fail) is in the start logic verbatim.
    const body = standalone.slice('#!/bin/bash\n'.length, standalone.indexOf('set -euo pipefail'));
    expect(body.length).toBeGreaterThan(1000);
    const startLogic = renderStartLogic({ provider });
    expect(startLogic).toContain(body);
    expect(startLogic.match(/^install_runner\(\) \{$/gm)).toHaveLength(1);
  });

  it.each(PROVIDERS)('%s: renders the pins and the OS packages of the contract', (provider) => {
    const pkg = DEFAULT_RUNNER_PACKAGES[provider];
    const script = renderInstallScript({ provider });
    for (const value of [pkg.x64.url, pkg.x64.sha256, pkg.arm64.url, pkg.arm64.sha256]) expect(script).toContain(value);
    expect(script).toContain(`I_PACKAGES_DNF=(${RUNNER_OS_PACKAGES[provider].dnf.join(' ')})`);
    // A word of alternatives is one shell word: quoted, or bash would run it as a pipeline.
    const apt = RUNNER_OS_PACKAGES[provider].apt.map((w) => (w.includes('|') ? `'${w}'` : w));
    expect(script).toContain(`I_PACKAGES_APT=(${apt.join(' ')})`);
  });

  it('names a package for every library installdependencies.sh installs, per package manager, each word one or more package names', () => {
    const github = RUNNER_OS_PACKAGES[Provider.GITHUB];
    for (const lib of ['lttng-ust', 'openssl-libs', 'krb5-libs', 'zlib', 'libicu', 'git']) expect(github.dnf).toContain(lib);
    // apt: the library's package by any of its release names (Ubuntu 22.04, 24.04, Debian 12).
    for (const names of [['libkrb5-3'], ['zlib1g'], ['liblttng-ust1', 'liblttng-ust1t64'], ['libssl3', 'libssl3t64'], ['libicu70', 'libicu72', 'libicu74'], ['git']]) {
      const word = github.apt.find((w) => w.split('|').some((n) => names.includes(n)));
      expect(word, names.join(' or ')).toBeDefined();
      for (const n of names) expect(word!.split('|')).toContain(n);
    }
    for (const word of [...github.dnf, ...github.apt, ...RUNNER_OS_PACKAGES[Provider.GITLAB].apt]) {
      expect(word).toMatch(/^[a-z0-9][a-z0-9.+-]*(\|[a-z0-9][a-z0-9.+-]*)*$/);
    }
  });

  it('renders an override instead of the pin', () => {
    const script = renderUserData({ provider: Provider.GITHUB, runnerPackage: mirror });
    expect(script).toContain(mirror.arm64.url);
    expect(script).toContain(mirror.x64.sha256);
    expect(script).not.toContain(DEFAULT_RUNNER_PACKAGES[Provider.GITHUB].x64.sha256);
  });

  it('refuses a placeholder checksum and an out-of-range bound with the field named', () => {
    const placeholder = { ...mirror, x64: { ...mirror.x64, sha256: '0'.repeat(64) } };
    expect(() => renderUserData({ provider: Provider.GITHUB, runnerPackage: placeholder, downloadRetries: 11 })).toThrow(
      /downloadRetries 11 must be an integer from 0 to 10[\s\S]*runnerPackage\.x64\.sha256 "0{64}" looks like a placeholder/,
    );
  });
});

describe('WarmRunners runnerPackage', () => {
  const build = (runnerPackage?: RunnerPackage): Template => {
    const s = new Stack(new App(), 'P');
    new WarmRunners(s, 'Runners', {
      vpc: new ec2.Vpc(s, 'Vpc'),
      github: { appId: '1', organization: 'o' },
      pools: [{ name: 'linux', provider: Provider.GITHUB, machineImage: ec2.MachineImage.latestAmazonLinux2023(), ...(runnerPackage ? { runnerPackage } : {}) }],
    });
    return Template.fromStack(s);
  };
  const userDataOf = (t: Template): string => {
    const [lt] = Object.values(t.findResources('AWS::EC2::LaunchTemplate'));
    return decodeUserData(lt!.Properties.LaunchTemplateData.UserData as string);
  };

  it('installs the pinned release by default and the pool\'s override when given', () => {
    expect(userDataOf(build())).toContain(DEFAULT_RUNNER_PACKAGES[Provider.GITHUB].x64.url);
    const overridden = userDataOf(build(mirror));
    expect(overridden).toContain(mirror.x64.url);
    expect(overridden).toContain('I_VERSION=2.339.0');
  });

  it('fails synth on a bad override, naming the pool, the field and the fix', () => {
    expect(() => build({ ...mirror, arm64: { url: 'http://mirror.example.com/r', sha256: 'TODO' } })).toThrow(
      /pools\[0\] \(pool "linux"\): cannot render the boot script:\n- runnerPackage\.arm64\.url "http:\/\/mirror\.example\.com\/r" must use https[\s\S]*runnerPackage\.arm64\.sha256 must be a SHA-256 as 64 lower-case hexadecimal digits/,
    );
  });
});
