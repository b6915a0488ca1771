/**
 * The runner releases the boot script installs on an image without a runner (a stock Amazon
 * Linux 2023 or Ubuntu): one pinned release per provider, with a URL and a SHA-256 per
 * architecture, and the OS packages each needs per package manager. The boot script (templates/install-runner.sh) gets them by
 * rendering; a pool overrides them with its `runnerPackage` prop (a mirror, a private bucket,
 * a newer release). How to bump and verify them: docs/operations.md, "Upgrading the pinned
 * runner releases".
 */
import { Provider } from './boot';

/** One downloadable file of a runner release. */
export interface RunnerPackageDownload {
  /** Where to fetch it: https (a mirror or a bucket works), or http only to a loopback address (a test server). */
  readonly url: string;
  /** Its SHA-256: 64 lower-case hexadecimal digits. */
  readonly sha256: string;
}

/** A runner release, one file per CPU architecture. */
export interface RunnerPackage {
  /** The release's version, for the boot log and the docs (for example "2.338.0"). */
  readonly version: string;
  /** x86_64 instances: the GitHub `linux-x64` tarball or the GitLab `linux-amd64` binary. */
  readonly x64: RunnerPackageDownload;
  /** arm64 (Graviton) instances: the GitHub `linux-arm64` tarball or the GitLab `linux-arm64` binary. */
  readonly arm64: RunnerPackageDownload;
}

/** The architectures the boot script installs for, as `uname -m` names them. */
export const RUNNER_ARCHITECTURES = { x86_64: 'x64', aarch64: 'arm64' } as const;

const GITHUB_VERSION = '2.338.0';
const githubUrl = (arch: string): string =>
  `https://github.com/actions/runner/releases/download/v${GITHUB_VERSION}/actions-runner-linux-${arch}-${GITHUB_VERSION}.tar.gz`;
const GITLAB_VERSION = '19.0.1';
const gitlabUrl = (arch: string): string => `https://gitlab-runner-downloads.s3.amazonaws.com/v${GITLAB_VERSION}/binaries/gitlab-runner-linux-${arch}`;

/**
 * The default release per provider.
 *
 * GitHub 2.338.0: the SHA-256 values are the "BEGIN SHA linux-x64" / "BEGIN SHA linux-arm64"
 * lines of the release notes of https://github.com/actions/runner/releases/tag/v2.338.0, as
 * several independent public sources quote them (the x64 tarball is 227,660,598 bytes);
 * looked up 2026-12-02.
 *
 * GitLab 19.0.1: GitLab publishes the SHA-256 values in
 * https://gitlab-runner-downloads.s3.amazonaws.com/v19.0.1/release.sha256 (entries
 * binaries/gitlab-runner-linux-amd64 and -arm64). This machine cannot reach it; the values
 * below come from ONE public source only: a public Ansible repository's pin file
 * (adrienkohlbecker/homelab, group_vars/all/versions.yml, which says they were computed from
 * the published binaries on 2026-06-10), looked up 2026-12-02. No second independent source
 * was found: check them against release.sha256 before relying on them with
 * `npm run check-runner-pins` (bin/check-runner-pins.ts, from a machine with internet access;
 * docs/operations.md, "Upgrading the pinned runner releases"), which checks the GitHub values
 * against the release notes too.
 */
export const DEFAULT_RUNNER_PACKAGES: Readonly<Record<Provider, RunnerPackage>> = {
  [Provider.GITHUB]: {
    version: GITHUB_VERSION,
    x64: { url: githubUrl('x64'), sha256: 'af4b794c1bc41d73d40535e3fe092a39f9679cd8d965954c2aca25a05ca41d32' },
    arm64: { url: githubUrl('arm64'), sha256: '628b4a7258487b80c1d3c221095a7ded349f5ae0175fd3dfab708d07428f041b' },
  },
  [Provider.GITLAB]: {
    version: GITLAB_VERSION,
    x64: { url: gitlabUrl('amd64'), sha256: '972a2bebaf940a767ac022bfebbc9df077388a85fbf1b6cf3d19eb981d5a92b6' },
    arm64: { url: gitlabUrl('arm64'), sha256: 'fd2d07bf3ee40b495cf0affa46257407dbba9c18e46d6a91001dee938d8b10ac' },
  },
};

/**
 * The package managers the install step knows (templates/install-runner.sh `install_packages`):
 * dnf where the image has it (Amazon Linux 2023), else apt-get (Ubuntu, Debian).
 */
export enum PackageManager {
  DNF = 'dnf',
  APT = 'apt',
}

/**
 * In a package list, a word `a|b|c` means the first of a, b, c that the package manager's
 * repositories know: a library's package name carries its soname or ABI and changes between
 * releases (Ubuntu 22.04 `libicu70`, 24.04 `libicu74`, Debian 12 `libicu72`).
 */
export const PACKAGE_ALTERNATIVES_SEPARATOR = '|';

/**
 * What the install step adds before the runner may park, per provider and package manager.
 * - GitHub: the .NET runtime's libraries, as the runner's bin/installdependencies.sh installs
 *   them (actions/runner, src/Misc/layoutbin/installdependencies.sh, read 2026-12-06).
 *   dnf: `lttng-ust openssl-libs krb5-libs zlib libicu` (its Fedora/RHEL list; the script does
 *   not recognise Amazon Linux 2023, so it is not run). apt: `libkrb5-3 zlib1g`, then the
 *   first of `liblttng-ust1 liblttng-ust0`, of the libssl and of the libicu versions it lists
 *   (it tries `apt-get install` on each in turn; here the first one the repositories know is
 *   picked, with the 64-bit-time `t64` names of Ubuntu 24.04 first, libssl3, which .NET 6
 *   and later use, where the script still names 1.1, and libicu77 and 78 (Ubuntu 26.04) beyond
 *   its list). Ubuntu 24.04's names (liblttng-ust1t64, libssl3t64, libicu74) as public
 *   Dockerfiles of runners on 24.04 install them, looked up 2026-12-06. Plus git: without git on PATH
 *   actions/checkout downloads a tarball through the API instead of cloning.
 * - GitLab: gitlab-runner is one static binary; the shell executor clones with git.
 */
export const RUNNER_OS_PACKAGES: Readonly<Record<Provider, Readonly<Record<PackageManager, readonly string[]>>>> = {
  [Provider.GITHUB]: {
    [PackageManager.DNF]: ['lttng-ust', 'openssl-libs', 'krb5-libs', 'zlib', 'libicu', 'git'],
    [PackageManager.APT]: [
      'libkrb5-3',
      'zlib1g',
      'liblttng-ust1t64|liblttng-ust1|liblttng-ust0',
      'libssl3t64|libssl3|libssl1.1',
      'libicu78|libicu77|libicu76|libicu75|libicu74|libicu73|libicu72|libicu71|libicu70|libicu69|libicu68|libicu67|libicu66',
      'git',
    ],
  },
  [Provider.GITLAB]: { [PackageManager.DNF]: ['git'], [PackageManager.APT]: ['git'] },
};

const SHA256_PATTERN = /^[0-9a-f]{64}$/;
const VERSION_PATTERN = /^[0-9A-Za-z][0-9A-Za-z._+-]{0,39}$/;
const LOOPBACK_HOSTS = ['127.0.0.1', 'localhost', '[::1]'];
/** Both URLs travel in the user data (16 KB, gzipped); a release or mirror URL is about 100. */
export const RUNNER_PACKAGE_URL_MAX_LENGTH = 256;

/**
 * An actionable message when `sha256` is not a plausible SHA-256 (not 64 lower-case hex
 * digits, or a placeholder: one character or one short block repeated, few distinct digits),
 * undefined when it is.
 */
export function checksumProblem(name: string, sha256: string): string | undefined {
  if (typeof sha256 !== 'string' || !SHA256_PATTERN.test(sha256)) {
    return `${name} must be a SHA-256 as 64 lower-case hexadecimal digits (sha256sum prints it), got "${String(sha256).slice(0, 80)}"`;
  }
  // A real digest has about 16 distinct digits and no period; 64 = 2^6, so a repeated block has
  // a length of 1 to 32 that divides it.
  const repeated = [1, 2, 4, 8, 16, 32].some((n) => sha256 === sha256.slice(0, n).repeat(64 / n));
  if (repeated || new Set(sha256).size < 8) {
    return `${name} "${sha256}" looks like a placeholder, not a digest: put the release's published SHA-256 there`;
  }
  return undefined;
}

/** Query keys of presigned or token URLs (S3 SigV4 and SigV2, Azure SAS, common token names). */
const CREDENTIAL_QUERY = /[?&](x-amz-(signature|credential|security-token)|signature|sig|awsaccesskeyid|token|access_token|private_token|password)=/i;

function urlProblem(name: string, url: string): string | undefined {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (typeof url !== 'string' || !parsed || url.length > RUNNER_PACKAGE_URL_MAX_LENGTH || /[\s'"`\\]/.test(url)) {
    return `${name} "${String(url).slice(0, 80)}" must be an absolute URL of at most ${RUNNER_PACKAGE_URL_MAX_LENGTH} characters without spaces or quotes`;
  }
  // The URL travels in the launch template's user data and in the boot log: a credential in it
  // (user:password, a presigned S3 query) would be readable by anyone who can read either.
  if (parsed.username || parsed.password || CREDENTIAL_QUERY.test(parsed.search)) {
    return `${name} must not carry credentials (user:password@ or a presigned query such as X-Amz-Signature): the URL is stored in the launch template's user data and logged; let the instance role read a private bucket instead (docs/boot-modes.md)`;
  }
  // The checksum guards the content either way; https keeps the fetch private and unblocked by
  // proxies that refuse plain http. Plain http is for a test server on the loopback only.
  if (parsed.protocol === 'https:') return undefined;
  if (parsed.protocol === 'http:' && LOOPBACK_HOSTS.includes(parsed.hostname)) return undefined;
  return `${name} "${url}" must use https (http is accepted only for a loopback test server such as http://127.0.0.1:8080/...)`;
}

/** Every problem of a runner package, as actionable messages (empty when it can be used). */
export function runnerPackageProblems(pkg: RunnerPackage, name = 'runnerPackage'): string[] {
  const problems: string[] = [];
  if (typeof pkg?.version !== 'string' || !VERSION_PATTERN.test(pkg.version)) {
    problems.push(`${name}.version "${String(pkg?.version)}" must be a release version such as "2.338.0" (letters, digits, ".", "_", "+", "-", at most 40)`);
  }
  for (const arch of ['x64', 'arm64'] as const) {
    const download = pkg?.[arch];
    if (!download) {
      problems.push(`${name}.${arch} is missing: give { url, sha256 } for every architecture (repeat one if the pool never uses the other)`);
      continue;
    }
    const u = urlProblem(`${name}.${arch}.url`, download.url);
    if (u) problems.push(u);
    const c = checksumProblem(`${name}.${arch}.sha256`, download.sha256);
    if (c) problems.push(c);
  }
  if (pkg?.x64 && pkg?.arm64 && pkg.x64.sha256 === pkg.arm64.sha256 && pkg.x64.url !== pkg.arm64.url) {
    problems.push(`${name}: x64 and arm64 have the same sha256 for different URLs; each architecture's file has its own digest`);
  }
  return problems;
}
