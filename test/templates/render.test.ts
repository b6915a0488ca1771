import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  BOOT_LOG_KEYS,
  PROVIDERS,
  RUNNER_CONFIG_KEYS,
  TAG_NAMES,
  ssmPaths,
  tagKeys,
  Provider,
  RUNNER_PACKAGE_URL_MAX_LENGTH,
  REUSE_LIMITS,
  ReuseScope,
} from '../../lambdas/shared/contract';
import { DockerPullPolicy, GitLabExecutor } from '../../lib/props';
import {
  DOCKER_DEFAULTS,
  HOST_PATH_MAX_LENGTH,
  PREPARE_COMMANDS_MAX,
  PREPARE_COMMANDS_MAX_TOTAL,
  START_LOGIC_MARKERS,
  USER_DATA_LIMIT_BYTES,
  checkUserDataSize,
  compressUserData,
  decodeUserData,
  encodeUserData,
  findSecretLikeValues,
  renderHookScript,
  renderHookUnit,
  renderStartLogic,
  renderUserData,
  resolveUserDataOptions,
  shellQuote,
  type UserDataOptions,
} from '../../lib/user-data';

const repo = join(__dirname, '..', '..');
const template = readFileSync(join(repo, 'templates', 'start-runner.sh'), 'utf8');
const lines = (text: string, line: string): number => text.split('\n').filter((l) => l === line).length;

/**
 * Incompressible text: a seeded generator (the figures repeat from run to run) drawing from
 * the widest alphabet the field's validation accepts, so gzip finds nothing to share.
 */
function noiseSource(seed: number): (alphabet: string, length: number) => string {
  let state = seed >>> 0;
  const next = (): number => {
    // mulberry32
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  return (alphabet, length) => Array.from({ length }, () => alphabet[Math.floor(next() * alphabet.length)]).join('');
}
const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const LOWER = 'abcdefghijklmnopqrstuvwxyz';
/** The characters of a path segment every path check accepts. */
const SEGMENT = `${ALNUM}_+-`;

/**
 * The largest options the renderer accepts, as the worst case a user can reach: every bounded
 * input at its bound, and every free-text input (prepare commands, paths, cache directories,
 * Docker image and volumes, user, prefix, URLs, version, unit name) filled with random text of
 * the widest alphabet its validation accepts, which gzip cannot shrink.
 */
function largestOptions(provider: Provider, seed = 24): UserDataOptions {
  const noise = noiseSource(seed);
  const max = HOST_PATH_MAX_LENGTH;
  /** An absolute path of exactly `length` characters in segments of up to 50. */
  const path = (length: number, head = ''): string => {
    let out = head;
    while (out.length < length) {
      const room = length - out.length - 1;
      out += `/${noise(SEGMENT, Math.min(50, room < 52 ? room : 50))}`;
    }
    return out;
  };
  const perCommand = Math.floor(PREPARE_COMMANDS_MAX_TOTAL / PREPARE_COMMANDS_MAX);
  const url = (arch: string): string => {
    const head = 'https://';
    const host = `${noise(LOWER, 60)}.example`;
    return `${head}${host}${path(RUNNER_PACKAGE_URL_MAX_LENGTH - head.length - host.length - arch.length - 1)}/${arch}`;
  };
  const endpoint = (scheme: string): string => `${scheme}${noise(`${LOWER}0123456789-`, 100 - scheme.length - 4)}.com`;
  const volumesTotal = DOCKER_DEFAULTS.volumesMaxTotal;
  const volumeLength = Math.floor(volumesTotal / DOCKER_DEFAULTS.volumesMax);
  const cacheLength = Math.min(200, Math.floor(REUSE_LIMITS.cacheDirectoriesTotal / REUSE_LIMITS.cacheDirectories));
  return {
    provider,
    prefix: `p${noise(`${ALNUM}_.-`, 31)}`,
    // Following the newest release renders the release parameter's name too.
    followLatestRunner: true,
    runnerUser: `u${noise(`${LOWER}0123456789_-`, 31)}`,
    runnerDir: path(max),
    gitlabRunnerBinary: path(max),
    prepareCommands: Array.from({ length: PREPARE_COMMANDS_MAX }, () => `echo ${noise(ALNUM, perCommand - 5)}`),
    waitSeconds: 86_400,
    pollSeconds: 299.999,
    retryDelaySeconds: 299.999,
    imdsAttempts: 60,
    awsAttempts: 20,
    httpTimeoutSeconds: 59.999,
    awsConnectTimeoutSeconds: 60,
    awsReadTimeoutSeconds: 60,
    awsCliMaxAttempts: 10,
    runnerWaitTimeoutSeconds: 86_400,
    runnerPackage: {
      version: `v${noise(`${ALNUM}._+-`, 39)}`,
      x64: { url: url('x64'), sha256: 'af4b794c1bc41d73d40535e3fe092a39f9679cd8d965954c2aca25a05ca41d32' },
      arm64: { url: url('arm64'), sha256: '628b4a7258487b80c1d3c221095a7ded349f5ae0175fd3dfab708d07428f041b' },
    },
    downloadSeconds: 3600,
    downloadRetries: 10,
    packageInstallSeconds: 3600,
    unitName: `${noise(`${ALNUM}_.:-`, 100)}.service`,
    hostPaths: {
      unitDir: path(max),
      hookPath: path(max),
      stateDir: path(max),
      logFile: path(max),
      machineIdFile: path(max),
      preReadDevice: path(max),
      dmiAssetTagFile: path(max),
      randomUuidFile: path(max),
      runnerHome: path(max),
      tmpDir: path(max),
      varTmpDir: path(max),
      shmDir: path(max),
      snapBinDir: path(max),
    },
    // The fleet's extra CA certificates: their parameter's name (the prefix's) and digest (random hex: incompressible).
    caCertificatesSha256: noise('0123456789abcdef', 64),
    reuse: {
      scope: ReuseScope.REPOSITORY,
      maxJobs: REUSE_LIMITS.maxJobs,
      maxAgeSeconds: REUSE_LIMITS.maxAgeSeconds,
      cacheDirectories: Array.from({ length: REUSE_LIMITS.cacheDirectories }, () => path(cacheLength, '/opt')),
    },
    docker: {
      gitlabExecutor: GitLabExecutor.DOCKER,
      image: `r${noise(`${LOWER}0123456789`, 254)}`,
      privileged: true,
      pullPolicy: DockerPullPolicy.IF_NOT_PRESENT,
      volumes: Array.from({ length: DOCKER_DEFAULTS.volumesMax }, () => {
        const half = Math.floor((volumeLength - 3) / 2);
        return `${path(half)}:${path(volumeLength - 4 - half)}:ro`;
      }),
    },
    dockerReadySeconds: 3600,
    imdsEndpoint: endpoint('http://'),
    awsCli: path(max),
    awsEndpointUrl: endpoint('https://'),
  };
}

describe('Docker (the pool prop docker)', () => {
  const flags = (text: string): string => /^GL_EXECUTOR=.*$/m.exec(text.replace(/^.* (GL_EXECUTOR=)/m, '$1'))?.[0] ?? '';
  it('renders no Docker and the shell executor without the prop', () => {
    const text = renderStartLogic({ provider: Provider.GITLAB });
    expect(text).toContain('I_DOCKER=0 ');
    expect(flags(text)).toMatch(/^GL_EXECUTOR=shell /);
  });
  it('renders the install and the docker executor with its defaults for docker: {}', () => {
    const text = renderStartLogic({ provider: Provider.GITLAB, docker: {} });
    expect(text).toContain('I_DOCKER=1 ');
    expect(flags(text)).toMatch(/^GL_EXECUTOR=docker GL_IMAGE=alpine:3 GL_PRIVILEGED=0 GL_PULL=if-not-present /);
    expect(text).toContain('GL_VOLUMES=()');
  });
  it('keeps the shell executor when asked, with Docker installed', () => {
    const text = renderStartLogic({ provider: Provider.GITLAB, docker: { gitlabExecutor: GitLabExecutor.SHELL } });
    expect(text).toContain('I_DOCKER=1 ');
    expect(flags(text)).toMatch(/^GL_EXECUTOR=shell /);
  });
  it('refuses, naming each bad value, an image, a pull policy, an executor and volumes it cannot render', () => {
    expect(() =>
      resolveUserDataOptions({
        provider: Provider.GITLAB,
        docker: { image: 'alpine; rm -rf /', pullPolicy: 'sometimes' as DockerPullPolicy, gitlabExecutor: 'ssh' as GitLabExecutor, volumes: ['relative:/x', ...Array.from({ length: 8 }, () => '/cache')] },
      }),
    ).toThrow(/docker\.gitlabExecutor "ssh"[\s\S]*docker\.pullPolicy "sometimes"[\s\S]*docker\.image "alpine; rm -rf \/"[\s\S]*docker\.volumes has 9 entries[\s\S]*docker\.volumes entry "relative:\/x"/);
  });
});

describe('renderUserData', () => {
  it.each(PROVIDERS)('renders %s user data that runs the start logic between the markers, each exactly once', (provider) => {
    const userData = renderUserData({ provider });
    expect(userData.startsWith('#!/bin/bash\n')).toBe(true);
    expect(lines(userData, START_LOGIC_MARKERS.begin)).toBe(1);
    expect(lines(userData, START_LOGIC_MARKERS.end)).toBe(1);
    expect(userData.indexOf(START_LOGIC_MARKERS.begin)).toBeLessThan(userData.indexOf(START_LOGIC_MARKERS.end));
    expect(userData).toContain(renderStartLogic({ provider }));
    expect(userData).not.toMatch(/@@[A-Z_]+@@/);
    expect(userData).toContain(` PROVIDER=${provider} `);
  });

  it.each(PROVIDERS)('keeps the largest %s rendering under EC2 16 KB limit, measured on the gzip the launch template carries', (provider) => {
    const userData = renderUserData(largestOptions(provider));
    const text = Buffer.byteLength(userData, 'utf8');
    const compressed = compressUserData(userData).length;
    // EC2 measures the raw bytes before base64 ("Work with instance user data"); the raw
    // bytes are the gzip stream, which cloud-init decompresses. The sizes show in the test output.
    expect(compressed).toBeLessThanOrEqual(USER_DATA_LIMIT_BYTES);
    expect(checkUserDataSize(userData)).toBe(compressed);
    console.log(`largest ${provider} rendering: ${text} bytes of script, ${compressed} bytes gzip, headroom ${USER_DATA_LIMIT_BYTES - compressed} bytes`);
    const plain = renderUserData({ provider });
    console.log(`default ${provider} rendering: ${Buffer.byteLength(plain)} bytes of script, ${compressUserData(plain).length} bytes gzip, headroom ${USER_DATA_LIMIT_BYTES - compressUserData(plain).length} bytes`);
    expect(lines(userData, START_LOGIC_MARKERS.begin)).toBe(1);
    expect(lines(userData, START_LOGIC_MARKERS.end)).toBe(1);
  });

  it.each(PROVIDERS)('keeps the largest %s rendering under the limit whatever the random text (other seeds)', (provider) => {
    const sizes = [1, 2, 3, 4, 5].map((seed) => compressUserData(renderUserData(largestOptions(provider, seed))).length);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(USER_DATA_LIMIT_BYTES);
    console.log(`largest ${provider} rendering, seeds 1-5: at most ${Math.max(...sizes)} bytes gzip, headroom ${USER_DATA_LIMIT_BYTES - Math.max(...sizes)} bytes`);
  });

  it('refuses Docker volumes and cache directories over their totals, naming the prop, the bound and the fix', () => {
    const volumes = Array.from({ length: 6 }, (_, i) => `/${'v'.repeat(90)}${i}`);
    expect(() => resolveUserDataOptions({ provider: Provider.GITLAB, docker: { volumes } })).toThrow(
      /docker\.volumes total 552 bytes, at most 512 fit in user data: mount one parent directory/,
    );
    const cacheDirectories = Array.from({ length: 6 }, (_, i) => `/opt/${'c'.repeat(85)}${i}`);
    expect(() => resolveUserDataOptions({ provider: Provider.GITHUB, reuse: { scope: ReuseScope.REPOSITORY, maxJobs: 2, maxAgeSeconds: 3600, cacheDirectories } })).toThrow(
      /reuse\.cacheDirectories total 546 bytes, at most 512 fit in user data: list a common parent directory/,
    );
  });

  it('compresses deterministically: the same text gives the same bytes, with no time or host in the gzip header', () => {
    const userData = renderUserData({ provider: Provider.GITHUB });
    const a = compressUserData(userData);
    expect(compressUserData(userData).equals(a)).toBe(true);
    // RFC 1952: ID1 ID2 CM FLG MTIME(4) XFL OS; no name, no comment, MTIME 0, OS 3 (Unix).
    expect([...a.subarray(0, 4)]).toEqual([0x1f, 0x8b, 8, 0]);
    expect(a.readUInt32LE(4)).toBe(0);
    expect(a[9]).toBe(3);
    expect(decodeUserData(encodeUserData(userData))).toBe(userData);
    // Plain (not gzip) base64 user data decodes as it is.
    expect(decodeUserData(Buffer.from('#!/bin/bash\necho hi\n').toString('base64'))).toBe('#!/bin/bash\necho hi\n');
  });

  it('refuses, with both sizes and what to do, user data whose gzip would not fit', () => {
    // Random text barely compresses: about 24 KB of base64 stays above 16 KB as gzip.
    const noise = `#!/bin/bash\n: ${randomBytes(18_000).toString('base64')}\n`;
    expect(() => checkUserDataSize(noise)).toThrow(
      /rendered user data is \d+ bytes gzip-compressed \(\d+ bytes of script\), over EC2's limit of 16384 \(before base64\): shorten or drop prepare commands, cache directories or Docker volumes/,
    );
    // Named by prop, largest first: what the user can shorten.
    expect(() => checkUserDataSize(noise, { prepareCommands: 1000, 'docker.volumes': 500, 'reuse.cacheDirectories': 700, hostPaths: 0 })).toThrow(
      /over EC2's limit of 16384 \(before base64\); largest inputs: prepareCommands 1000 bytes, reuse\.cacheDirectories 700 bytes, docker\.volumes 500 bytes: shorten/,
    );
  });

  it('renders every shared value from the contract, and the template spells none of them', () => {
    const prefix = 'fleet-a';
    const logic = renderStartLogic({ provider: Provider.GITHUB, prefix });
    const tags = tagKeys(prefix);
    for (const key of [tags.warmStandby, tags.activatedAt, tags.traceId, ssmPaths(prefix).runnerConfigRoot]) {
      expect(logic).toContain(key);
    }
    for (const key of Object.values(BOOT_LOG_KEYS)) expect(logic).toContain(`=${key}`);
    for (const key of Object.values(RUNNER_CONFIG_KEYS)) expect(logic).toContain(`=${key}`);
    // "pool" is also an English word of the log messages; every other tag name is hyphenated.
    for (const name of Object.values(TAG_NAMES).filter((n) => n.includes('-'))) expect(template).not.toContain(name);
    for (const key of Object.values(BOOT_LOG_KEYS)) expect(template).not.toContain(`${key}=`);
    for (const key of Object.values(RUNNER_CONFIG_KEYS)) expect(template).not.toMatch(new RegExp(`["' ]${key}=[^$]`));
    expect(template).not.toContain('/runners/config/');
    expect(template).not.toMatch(/==\s*"?git(hub|lab)\b/);
  });

  it('renders the hook exactly as PRIME writes it: a shebang, then the start logic', () => {
    expect(renderHookScript({ provider: Provider.GITLAB })).toBe(`#!/bin/bash\n${renderStartLogic({ provider: Provider.GITLAB })}\n`);
  });

  it('puts no secret-looking value into user data, and refuses prepare commands that carry one', () => {
    for (const provider of PROVIDERS) {
      expect(findSecretLikeValues(renderUserData({ provider }))).toEqual([]);
      expect(findSecretLikeValues(renderUserData(largestOptions(provider)))).toEqual([]);
    }
    const leaky = ['echo ghp_0123456789abcdefghijABCDEFGHIJ0123 > /root/t', 'export TOKEN=glrt-abcdefghijklmnop0123'];
    expect(() => renderUserData({ provider: Provider.GITHUB, prepareCommands: leaky })).toThrow(
      /prepareCommands\[0\] looks like it contains a secret \(GitHub token\)[^]*prepareCommands\[1\] looks like it contains a secret \(GitLab token\)/,
    );
    // The message names the kind of secret, never the value.
    expect(() => renderUserData({ provider: Provider.GITHUB, prepareCommands: leaky })).not.toThrow(/ghp_0123/);
  });

  it.each([
    ['GitHub token', 'ghp_abcdefghijklmnopqrstuvwxyz0123456789'],
    ['GitLab token', 'glrt-0123456789abcdefghij'],
    ['AWS access key id', 'AKIAIOSFODNN7EXAMPLE'],
    ['AWS secret access key', 'aws_secret_access_key = x'],
    ['private key', '-----BEGIN RSA PRIVATE KEY-----'],
    ['GitHub JIT runner config', 'run.sh --jitconfig eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9eyJhbGciOiJIUzI1'],
  ])('finds a %s', (kind, text) => {
    expect(findSecretLikeValues(`x ${text} y`)).toContain(kind);
  });
});

describe('resolveUserDataOptions', () => {
  it('fills production defaults', () => {
    const o = resolveUserDataOptions({ provider: Provider.GITLAB });
    expect(o).toMatchObject({
      prefix: 'warm-runners',
      runnerUser: 'runner',
      runnerDir: '/opt/gitlab-runner',
      unitName: 'warm-runners-start-runner.service',
      imdsEndpoint: 'http://169.254.169.254',
      awsCli: 'aws',
      awsEndpointUrl: '',
      hostPaths: {
        unitDir: '/etc/systemd/system',
        hookPath: '/usr/local/sbin/warm-runners-start-runner',
        machineIdFile: '/etc/machine-id',
        preReadDevice: '',
        dmiAssetTagFile: '/sys/devices/virtual/dmi/id/board_asset_tag',
      },
    });
    expect(resolveUserDataOptions({ provider: Provider.GITHUB }).runnerDir).toBe('/opt/actions-runner');
  });

  it('bounds every aws CLI call in production: 3 s to connect, 5 s to read, 2 attempts in standard mode', () => {
    expect(resolveUserDataOptions({ provider: Provider.GITHUB })).toMatchObject({
      awsConnectTimeoutSeconds: 3,
      awsReadTimeoutSeconds: 5,
      awsCliMaxAttempts: 2,
    });
    const logic = renderStartLogic({ provider: Provider.GITHUB });
    expect(logic).toContain(' CONNECT=3 READ=5 CLI_TRIES=2 ');
    // One call site, carrying both timeouts and the retry settings as that call's environment.
    const calls = logic.split('\n').filter((line) => line.includes('"$AWS" $'));
    expect(calls).toHaveLength(1);
    expect(calls[0]).toContain(
      'AWS_MAX_ATTEMPTS=$CLI_TRIES AWS_RETRY_MODE=standard "${lim[@]}" "$AWS" ${AWS_URL:+--endpoint-url "$AWS_URL"} --cli-connect-timeout "$CONNECT" --cli-read-timeout "$READ" ',
    );
    // Never exported: the runner is started from this shell.
    expect(logic).not.toMatch(/export\s+AWS_/);
  });


  it.each<[string, Partial<UserDataOptions>, RegExp]>([
    ['an unknown provider', { provider: 'bitbucket' as Provider }, /provider "bitbucket" must be one of github, gitlab/],
    ['a prefix SSM reserves', { prefix: 'ssm-x' }, /must not begin with "aws" or "ssm"/],
    ['a relative path', { runnerDir: 'opt/runner' }, /runnerDir "opt\/runner" must be an absolute path/],
    ['a path with a space', { hostPaths: { hookPath: '/usr/local/sbin/my hook' } }, /hostPaths.hookPath "\/usr\/local\/sbin\/my hook" must be an absolute path/],
    ['a path that is too long', { hostPaths: { logFile: `/${'x'.repeat(HOST_PATH_MAX_LENGTH)}` } }, /at most 64 characters/],
    ['a user name with capitals', { runnerUser: 'Runner' }, /runnerUser "Runner" must be a Linux user name/],
    ['root as the runner user', { runnerUser: 'root' }, /runnerUser "root" is refused: jobs run as the runner user, so give it an unprivileged user/],
    ['a read timeout of 0 (the CLI would block forever)', { awsReadTimeoutSeconds: 0 }, /awsReadTimeoutSeconds 0 must be an integer from 1 to 60/],
    ['a fractional connect timeout', { awsConnectTimeoutSeconds: 2.5 }, /awsConnectTimeoutSeconds 2.5 must be an integer from 1 to 60/],
    ['no CLI attempts', { awsCliMaxAttempts: 0 }, /awsCliMaxAttempts 0 must be an integer from 1 to 10/],
    ['a fractional WAIT limit', { waitSeconds: 1.5 }, /waitSeconds 1.5 must be an integer from 1 to 86400/],
    ['no IMDS attempts', { imdsAttempts: 0 }, /imdsAttempts 0 must be an integer from 1 to 60/],
    ['a negative retry delay', { retryDelaySeconds: -1 }, /retryDelaySeconds -1 must be a number/],
    ['an IMDS endpoint with a path', { imdsEndpoint: 'http://169.254.169.254/latest' }, /imdsEndpoint .* without a path/],
    ['an aws CLI with arguments', { awsCli: 'aws --debug' }, /awsCli "aws --debug" must be a command name or path/],
    ['a unit name that is no service', { unitName: 'boot.timer' }, /unitName "boot.timer" must be a systemd service name/],
    ['too many prepare commands', { prepareCommands: Array.from({ length: 17 }, () => 'true') }, /prepareCommands has 17 commands, at most 16/],
    ['an empty prepare command', { prepareCommands: ['  '] }, /prepareCommands\[0\] is empty/],
    ['a prepare command with a marker', { prepareCommands: [`echo '${START_LOGIC_MARKERS.end}'`] }, /contains a start-logic marker line/],
    ['prepare commands over the total', { prepareCommands: Array.from({ length: 10 }, () => 'x'.repeat(500)) }, /total 5000 bytes, at most 1024/],
  ])('refuses %s with an actionable message', (_name, patch, message) => {
    expect(() => resolveUserDataOptions({ provider: Provider.GITHUB, ...patch })).toThrow(message);
  });

  it('lists every problem at once', () => {
    expect(() => resolveUserDataOptions({ provider: Provider.GITHUB, runnerUser: 'A', waitSeconds: 0 })).toThrow(
      /cannot render the boot script:\n- runnerUser "A"[^]*\n- waitSeconds 0/,
    );
  });
});

describe('the start logic template', () => {
  it('keeps IMDS requests off any proxy the environment names', () => {
    const curls = template.split('\n').filter((line) => /\$\(curl\s/.test(line));
    expect(curls.length).toBeGreaterThanOrEqual(1);
    for (const line of curls) expect(line).toContain("--noproxy '*'");
  });
});

describe('renderHookUnit', () => {
  it('runs the hook after the network is online and is wanted by multi-user.target', () => {
    const unit = renderHookUnit({ provider: Provider.GITHUB, hostPaths: { hookPath: '/opt/boot/hook' } });
    expect(unit).toContain('\nExecStart=/opt/boot/hook\n');
    expect(unit).toContain('\nAfter=network-online.target\n');
    expect(unit).toContain('\nWants=network-online.target\n');
    expect(unit).toContain('\nWantedBy=multi-user.target\n');
    expect(unit).toContain('\nRestart=no\n');
    expect(unit).not.toMatch(/^[#;]/m);
  });
});

describe('shellQuote', () => {
  it.each(["plain", "with space", "it's", "$(id) `id` $HOME", "a\nb", "", "'", "\\", "!x"])('bash reads %j back unchanged', (value) => {
    const out = spawnSync('bash', ['-c', `printf %s ${shellQuote(value)}`], { encoding: 'utf8' });
    expect(out.stdout).toBe(value);
  });
});

describe('render-user-data CLI', () => {
  const cli = (...args: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', join(repo, 'bin', 'render-user-data.ts'), ...args], { encoding: 'utf8', cwd: repo });

  it('prints the user data for --provider github, the README first command', () => {
    const out = cli('--provider', 'github');
    expect(out.status).toBe(0);
    expect(out.stdout).toBe(renderUserData({ provider: Provider.GITHUB }));
  });

  it('gives a usage error for a bad flag and for a bad provider', () => {
    const bad = cli('--provider', 'github', '--bogus');
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/Unknown option '--bogus'[^]*usage: cdk-warm-runners-render --provider github\|gitlab/);
    const provider = cli('--provider', 'jenkins');
    expect(provider.status).toBe(2);
    expect(provider.stderr).toContain('--provider "jenkins" must be one of github, gitlab');
    expect(cli().stderr).toContain('--provider is required');
  });
});

describe('reuse rendering', () => {
  const reuse = { scope: ReuseScope.REPOSITORY, maxJobs: 7, maxAgeSeconds: 7200, cacheDirectories: ['/var/cache/tool', '/home/runner/.cache/pip'] };

  it("renders the pool's reuse settings, and none without reuse", () => {
    const logic = renderStartLogic({ provider: Provider.GITHUB, reuse });
    expect(logic).toContain(' REUSE=1 MAX_JOBS=7 MAX_AGE=7200 ');
    expect(logic).toContain('CACHES=(/var/cache/tool /home/runner/.cache/pip) TEMPS=(/tmp /var/tmp /dev/shm)');
    const tags = tagKeys('warm-runners');
    for (const key of [tags.affinity, tags.uses, tags.parking, tags.jobId, tags.runnerId, tags.idleSince]) expect(logic).toContain(`=${key} `);
    const plain = renderStartLogic({ provider: Provider.GITHUB });
    expect(plain).toContain(' REUSE=0 MAX_JOBS=0 MAX_AGE=0 ');
    expect(plain).toContain('CACHES=() ');
  });

  it('refuses cache directories cleaning would remove or that are system directories, and limits out of range', () => {
    const bad = (cacheDirectories: string[], extra: Partial<typeof reuse> = {}): (() => string) => () =>
      renderStartLogic({ provider: Provider.GITHUB, reuse: { ...reuse, ...extra, cacheDirectories } });
    expect(bad(['/tmp/cache'])).toThrow(/under a temp directory/);
    expect(bad(['/etc/cache'])).toThrow(/overlaps the system directory \/etc/);
    expect(bad(['/var/lib/warm-runners/cache'])).toThrow(/overlaps \/var\/lib\/warm-runners/);
    expect(bad(['/opt'])).toThrow(/overlaps \/opt\/actions-runner/);
    expect(bad(['relative/dir'])).toThrow(/absolute path/);
    expect(bad(['/var/cache/../etc'])).toThrow(/"\." or "\.\." segments/);
    expect(bad([], { maxJobs: 0 })).toThrow(/reuse.maxJobs 0/);
    expect(bad([], { maxAgeSeconds: 10 })).toThrow(/reuse.maxAgeSeconds 10/);
  });
});
