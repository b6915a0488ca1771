/**
 * The instance player's parts without moto: what it does per instance state, what it reads
 * from a boot log line, the local user data and its relocation, the machine layout, and
 * ending a machine's processes.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DescribeInstancesCommand, EC2Client } from '@aws-sdk/client-ec2';
import { mockClient } from 'aws-sdk-client-mock';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { LEDGER_LOG_KEYS, BOOT_LOG_KEYS, ssmPaths, tagKeys, Provider } from '../../lambdas/shared/contract';
import {
  LOCAL_APT_IMAGE_ID,
  LOCAL_APT_PACKAGE_SECONDS,
  LOCAL_TIME_BOUNDS,
  localTimeBounds,
  MACHINE_PATHS,
  relocateUserData,
  renderLocalUserData,
  TEMPLATE_IMDS,
  TEMPLATE_ROOT,
  type LocalMachineSettings,
} from '../../local/instances/launch-templates';
import { createMachine, enabledUnits, killSession, sessionPids } from '../../local/instances/machine';
import { decideAction, IDLE_FAILING_TICKS, InstancePlayer, parseBootLine, type PlayedView } from '../../local/instances/player';
import { scaled } from '../support/slowdown';

const machine: LocalMachineSettings = { prefix: 'parts', awsEndpoint: 'http://127.0.0.1:5123', sandboxRoot: '/tmp/unused' };

describe('decideAction', () => {
  const up: PlayedView = { up: true, gone: false, poweringOff: false, poweringDown: false };
  const down: PlayedView = { up: false, gone: false, poweringOff: false, poweringDown: false };
  const gone: PlayedView = { up: false, gone: true, poweringOff: false, poweringDown: false };
  const poweringOff: PlayedView = { up: true, gone: false, poweringOff: true, poweringDown: false };
  // Stopped from outside, its processes still being killed (`up` already cleared).
  const poweringDown: PlayedView = { up: false, gone: false, poweringOff: false, poweringDown: true };
  it.each([
    ['running', undefined, 'boot'],
    ['pending', undefined, 'boot'],
    ['running', down, 'boot'],
    ['running', up, 'none'],
    ['running', poweringOff, 'none'],
    ['running', gone, 'none'],
    ['stopped', up, 'power-down'],
    ['stopping', up, 'power-down'],
    ['stopped', down, 'none'],
    ['stopped', undefined, 'none'],
    ['stopped', poweringOff, 'none'],
    ['terminated', up, 'gone'],
    ['shutting-down', down, 'gone'],
    ['terminated', undefined, 'none'],
    ['terminated', gone, 'none'],
    ['terminated', poweringOff, 'none'],
    ['running', poweringDown, 'none'],
    ['pending', poweringDown, 'none'],
    ['stopped', poweringDown, 'none'],
    ['terminated', poweringDown, 'none'],
    [undefined, up, 'none'],
  ] as const)('%s, played %o: %s', (state, played, action) => {
    expect(decideAction(state, played)).toBe(action);
  });
});

describe('parseBootLine', () => {
  const at = '2026-11-29T19:27:56Z start-runner[25009]:';
  it('reads the mode, the trace id, the latency and the runner start', () => {
    expect(parseBootLine(`${at} ${BOOT_LOG_KEYS.traceId}=t-1 ${BOOT_LOG_KEYS.mode}=RUN instance=i-0abc`)).toEqual({ mode: 'RUN', traceId: 't-1' });
    expect(parseBootLine(`${at} ${BOOT_LOG_KEYS.mode}=PRIME instance=i-0abc`)).toEqual({ mode: 'PRIME' });
    expect(parseBootLine(`${at} ${BOOT_LOG_KEYS.traceId}=t-1 ${BOOT_LOG_KEYS.activationLatency}=4.712`)).toEqual({ traceId: 't-1', latency: 4.712 });
    expect(parseBootLine(`${at} ${BOOT_LOG_KEYS.activationLatency}=-0.250`)).toEqual({ latency: -0.25 });
    expect(parseBootLine(`${at} ${BOOT_LOG_KEYS.traceId}=t-1 starting the gitlab runner`)).toEqual({ traceId: 't-1', runnerStarting: 'gitlab' });
  });

  it('reads a ledger line: its stage and seconds since activation', () => {
    const k = LEDGER_LOG_KEYS;
    expect(parseBootLine(`${at} ${BOOT_LOG_KEYS.traceId}=t-1 ${k.pool}=gh ${k.stage}=boot-began ${k.seconds}=1.250`)).toEqual({ traceId: 't-1', stage: 'boot-began', stageSeconds: 1.25 });
    expect(parseBootLine(`${at} ${k.pool}=gh ${k.stage}=job-taken ${k.seconds}=soon`)).toEqual({});
  });
  it('reads the install step and a failed boot in the boot script\'s own words', () => {
    expect(parseBootLine(`${at} installed the github runner local-1`)).toEqual({ installed: 'local-1' });
    expect(parseBootLine(`${at} SHA-256 of http://127.0.0.1:1/gitlab-x64 is abc, the pin says def`)).toEqual({ error: 'SHA-256 of http://127.0.0.1:1/gitlab-x64 is abc, the pin says def' });
    expect(parseBootLine(`${at} error: the runner package: refused, nothing installed`)).toEqual({ error: 'the runner package: refused, nothing installed' });
    expect(parseBootLine(`${at} PRIME failed (status 1): not powering off`)).toEqual({ failed: true });
    expect(parseBootLine(`${at} failed (status 1) in RUN: terminating`)).toEqual({ failed: true });
    expect(parseBootLine(`${at} warm standby failed (status 1) before a mode: left for the pool to evict`)).toEqual({ failed: true });
    expect(parseBootLine(`${at} installing the github runner local-1 for x86_64 from http://127.0.0.1:1/github-x64.tar.gz`)).toEqual({});
    expect(parseBootLine(`${at} prepare command 1 failed (status 1) and was retried`)).toEqual({});
  });
  it('ignores what is not one of its keys', () => {
    expect(parseBootLine(`${at} ${BOOT_LOG_KEYS.mode}=REBOOT`)).toEqual({});
    expect(parseBootLine(`${at} x${BOOT_LOG_KEYS.mode}=RUN`)).toEqual({});
    expect(parseBootLine(`${at} starting the github runner later`)).toEqual({});
    expect(parseBootLine(`${at} ${BOOT_LOG_KEYS.activationLatency}=soon`)).toEqual({});
  });
});

describe('local user data', () => {
  const text = renderLocalUserData({ name: 'pool-a', provider: Provider.GITHUB, prepareCommands: ['echo ready'] }, machine);

  it('is the production renderer with every host path under the template root and the placeholder IMDS', () => {
    expect(text).toContain(`IMDS=${TEMPLATE_IMDS} `);
    expect(text).toContain(`AWS_URL=${machine.awsEndpoint}`);
    expect(text).toContain(`${ssmPaths('parts').runnerConfigRoot}`);
    expect(text).toContain(tagKeys('parts').warmStandby);
    for (const path of Object.values(MACHINE_PATHS).filter((p) => p !== MACHINE_PATHS.stallMarker)) {
      expect(text).toContain(`${TEMPLATE_ROOT}/${path}`);
    }
    // The stall command runs first, then the pool's own.
    expect(text.indexOf(`${TEMPLATE_ROOT}/${MACHINE_PATHS.stallMarker}`)).toBeLessThan(text.indexOf('echo ready'));
  });

  it('scales its time bounds with the host slowdown, within the renderer limits; delays and attempts stay', () => {
    expect(localTimeBounds()).toEqual(LOCAL_TIME_BOUNDS);
    expect(localTimeBounds(3)).toMatchObject({ waitSeconds: 180, logShipSeconds: 60, awsReadTimeoutSeconds: 15, httpTimeoutSeconds: 6, pollSeconds: 0.3, awsAttempts: 3 });
    // Whole seconds, and at most 60 s for the timeouts.
    expect(localTimeBounds(10.1)).toMatchObject({ waitSeconds: 606, logShipSeconds: 60, awsReadTimeoutSeconds: 51, awsConnectTimeoutSeconds: 21 });
    // A reading below 1 never shortens a bound.
    expect(localTimeBounds(0.5)).toEqual(LOCAL_TIME_BOUNDS);
    const slow = renderLocalUserData({ name: 'pool-a', provider: Provider.GITHUB }, { ...machine, slowdown: 3 });
    expect(slow).toMatch(/ READ=15 /);
    expect(slow).toMatch(/ WAIT_SECONDS=180 /);
    // The shipping bound is a hang catcher at the renderer's limit, slowdown or not.
    expect(slow).toMatch(/ SHIP_SECONDS=60 /);
    expect(text).toMatch(/ SHIP_SECONDS=60 /);
  });

  it("gives an apt pool's package manager calls a longer bound (the real apt-get and its mirror), the dnf shim's pools the short one", () => {
    expect(text).toContain(` I_PKG_SECONDS=${LOCAL_TIME_BOUNDS.packageInstallSeconds}`);
    const apt = renderLocalUserData({ name: 'pool-u', provider: Provider.GITHUB, imageId: LOCAL_APT_IMAGE_ID }, { ...machine, slowdown: 2 });
    expect(apt).toContain(` I_PKG_SECONDS=${LOCAL_APT_PACKAGE_SECONDS * 2}`);
  });

  it('names the pool when the renderer refuses it', () => {
    expect(() => renderLocalUserData({ name: 'bad', provider: Provider.GITHUB, runnerUser: 'root' }, machine)).toThrow(/pool "bad": .*runnerUser "root"/s);
  });

  it('is relocated into a machine directory and its IMDS server, and nothing of the template is left', () => {
    const moved = relocateUserData(text, '/tmp/sandbox/i-0123456789abcdef0', 'http://127.0.0.1:40123');
    expect(moved).not.toContain(TEMPLATE_ROOT);
    expect(moved).not.toContain(`IMDS=${TEMPLATE_IMDS} `);
    expect(moved).toContain('IMDS=http://127.0.0.1:40123 ');
    expect(moved).toContain(`/tmp/sandbox/i-0123456789abcdef0/${MACHINE_PATHS.stateDir}`);
    // The aws endpoint shares the placeholder's prefix ("http://127.0.0.1:9" of ":9xxx") only when it must not move.
    const nine = renderLocalUserData({ name: 'p', provider: Provider.GITHUB }, { ...machine, awsEndpoint: 'http://127.0.0.1:9876' });
    expect(relocateUserData(nine, '/tmp/m', 'http://127.0.0.1:40123')).toContain('AWS_URL=http://127.0.0.1:9876');
  });

  it('refuses what it cannot relocate', () => {
    expect(() => relocateUserData(text, '/tmp/with space', 'http://127.0.0.1:1')).toThrow(/machine directory/);
    expect(() => relocateUserData(text, '/tmp/m/', 'http://127.0.0.1:1')).toThrow(/machine directory/);
    expect(() => relocateUserData(text, '/tmp/m', 'http://169.254.169.254')).toThrow(/IMDS URL/);
    expect(() => relocateUserData('#!/bin/bash\necho production\n', '/tmp/m', 'http://127.0.0.1:1')).toThrow(/not rendered by renderLocalUserData/);
  });
});

describe('machine', () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'cwr-parts-'));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('lays out the machine: shims, aws, runner wrappers that set runnerEnv, and the units enabled', () => {
    const source = join(root, 'fakes');
    mkdirSync(source);
    writeFileSync(join(source, 'run.sh'), '#!/bin/bash\necho "log=$LOCAL_RUNNER_LOG args=$*"\n', { mode: 0o755 });
    const dir = join(root, 'i-0123456789abcdef0');
    const m = createMachine({ dir, instanceId: 'i-0123456789abcdef0', awsCli: '/bin/true', runnerSource: source, runnerEnv: { LOCAL_RUNNER_LOG: "/tmp/it's here" } });
    expect(['shutdown', 'poweroff', 'systemctl', 'aws'].every((b) => existsSync(join(m.binDir, b)))).toBe(true);
    expect(readFileSync(join(dir, MACHINE_PATHS.dmiAssetTagFile), 'utf8')).toBe('i-0123456789abcdef0\n');
    expect(statSync(dir).mode & 0o777).toBe(0o755);
    // The runner starts with env -i: only the wrapper gives it runnerEnv.
    const out = spawn('env', ['-i', join(dir, MACHINE_PATHS.runnerDir, 'run.sh'), '--jitconfig', 'x']);
    return new Promise<void>((resolve) => {
      let text = '';
      out.stdout.on('data', (c: Buffer) => (text += c.toString()));
      out.on('close', () => {
        expect(text).toBe("log=/tmp/it's here args=--jitconfig x\n");
        resolve();
      });
    }).then(() => {
      expect(enabledUnits(m)).toEqual([]);
      writeFileSync(join(m.unitDir, 'a.service'), '[Service]\nExecStart=/x/hook\n');
      const shim = spawn(join(m.binDir, 'systemctl'), ['enable', 'a.service'], { env: { SHIM_UNIT_DIR: m.unitDir } });
      return new Promise<void>((resolve) => shim.on('close', () => resolve()));
    }).then(() => {
      expect(enabledUnits(m)).toEqual([{ name: 'a.service', execStart: '/x/hook' }]);
    });
  });

  it('lays out a stock machine: no runner, and a runner user that exists only after useradd (the install shims)', () => {
    const dir = join(root, 'i-0stock');
    const m = createMachine({ dir, instanceId: 'i-0stock', awsCli: '/bin/true', stockRunnerUser: 'nobody' });
    expect(existsSync(join(dir, MACHINE_PATHS.runnerDir))).toBe(false);
    expect(['dnf', 'useradd', 'getent', 'shutdown'].every((b) => existsSync(join(m.binDir, b)))).toBe(true);
    const getent = () => spawnSync(join(m.binDir, 'getent'), ['passwd', 'nobody'], { env: { SHIM_CALLS: m.callsDir, PATH: process.env.PATH } }).status;
    expect(getent()).toBe(2);
    expect(spawnSync(join(m.binDir, 'useradd'), ['--create-home', 'nobody'], { env: { SHIM_CALLS: m.callsDir } }).status).toBe(0);
    expect(getent()).toBe(0);
    expect(() => createMachine({ dir: join(root, 'm4'), instanceId: 'i-0', awsCli: '/bin/true', stockRunnerUser: 'nobody', runnerSource: root })).toThrow(/either prebuilt/);
  });

  it("lays out an apt (Ubuntu-style) stock machine: the same shims but dnf, so the install step finds this host's apt-get", () => {
    const m = createMachine({ dir: join(root, 'i-0apt'), instanceId: 'i-0apt', awsCli: '/bin/true', stockRunnerUser: 'nobody', apt: true });
    expect(existsSync(join(m.binDir, 'dnf'))).toBe(false);
    expect(['useradd', 'getent', 'shutdown'].every((b) => existsSync(join(m.binDir, b)))).toBe(true);
    // The bats harness's apt shims never reach a played machine: its apt-get is the real one.
    expect(['apt-get', 'apt-cache'].some((b) => existsSync(join(m.binDir, b)))).toBe(false);
    expect(spawnSync('bash', ['-c', 'command -v dnf; command -v apt-get'], { env: { PATH: `${m.binDir}:${process.env.PATH}` }, encoding: 'utf8' }).stdout).toBe('/usr/bin/apt-get\n');
  });

  it('refuses a missing runner directory and a bad runnerEnv name', () => {
    expect(() => createMachine({ dir: join(root, 'm2'), instanceId: 'i-0', awsCli: '/bin/true', runnerSource: join(root, 'none') })).toThrow(/no runner binaries/);
    const source = join(root, 'fakes2');
    mkdirSync(source);
    expect(() => createMachine({ dir: join(root, 'm3'), instanceId: 'i-0', awsCli: '/bin/true', runnerSource: source, runnerEnv: { 'A B': '1' } })).toThrow(/runnerEnv name/);
  });

  it('ends every process of a session, a command under timeout (its own process group) included', async () => {
    // timeout moves itself into a process group of its own: a group kill would miss it.
    const child = spawn('bash', ['-c', 'trap "" TERM; timeout 60 sleep 60 & sleep 60 & wait'], { detached: true, stdio: 'ignore' });
    const sid = child.pid!;
    const deadline = Date.now() + scaled(2_000);
    while (sessionPids(sid).length < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(sessionPids(sid).length).toBe(4);
    await killSession(sid, 200);
    expect(sessionPids(sid)).toEqual([]);
  });
});

describe('InstancePlayer.idle', () => {
  it(`gives up with a clear error after ${IDLE_FAILING_TICKS} failing polls in a row`, async () => {
    const ec2 = mockClient(EC2Client);
    ec2.on(DescribeInstancesCommand).rejects(new Error('connect ECONNREFUSED 127.0.0.1:1'));
    const sandboxRoot = mkdtempSync(join(tmpdir(), 'cwr-idle-'));
    const player = new InstancePlayer({
      ec2: new EC2Client({ region: 'us-east-1' }),
      prefix: 'parts',
      machine: { ...machine, sandboxRoot },
      awsCli: 'aws',
      onEvent: () => undefined,
      pollMs: 5,
    });
    const errors = vi.spyOn(console, 'error').mockImplementation(() => undefined);
    try {
      player.start();
      await expect(player.idle()).rejects.toThrow(`instance player: ${IDLE_FAILING_TICKS} polls of moto in a row failed, last: connect ECONNREFUSED 127.0.0.1:1`);
      await player.stop();
    } finally {
      errors.mockRestore();
      ec2.restore();
      rmSync(sandboxRoot, { recursive: true, force: true });
    }
  });
});
