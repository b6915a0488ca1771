/**
 * The instance player against moto with the real aws CLI, curl and boot script: instances
 * launched from local launch templates prime and park, are activated and run their runner,
 * wait for a cold config, stall on demand, and leave nothing running behind.
 */
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { CloudWatchLogsClient, CreateLogGroupCommand } from '@aws-sdk/client-cloudwatch-logs';
import {
  CreateFleetCommand,
  CreateLaunchTemplateCommand,
  CreateTagsCommand,
  DescribeInstancesCommand,
  DescribeLaunchTemplatesCommand,
  DescribeLaunchTemplateVersionsCommand,
  DescribeSubnetsCommand,
  EC2Client,
  RunInstancesCommand,
  StartInstancesCommand,
  StopInstancesCommand,
} from '@aws-sdk/client-ec2';
import { GetParameterCommand, PutParameterCommand, SSMClient } from '@aws-sdk/client-ssm';
import { bootLogGroupName, CREATED_BY, encodeRunnerConfig, ssmPaths, tagKeys, WARM_STANDBY_VALUE, Provider, type RunnerConfig } from '../../lambdas/shared/contract';
import type { LocalEvent } from '../../local/events';
import {
  createLocalLaunchTemplate,
  LOCAL_IMAGE_ID,
  MACHINE_PATHS,
  renderLocalUserData,
  updateLocalLaunchTemplate,
  type LocalMachineSettings,
} from '../../local/instances/launch-templates';
import { decodeUserData, encodeUserData } from '../../lib/user-data';
import { resolveAwsCli } from '../../local/instances/machine';
import { InstancePlayer } from '../../local/instances/player';
import { startMoto, type MotoServer } from '../support/moto';
import { scaled, slowdown } from '../support/slowdown';

const prefix = 'playertest';
const keys = tagKeys(prefix);
const paths = ssmPaths(prefix);

let moto: MotoServer;
let ec2: EC2Client;
let ssm: SSMClient;
let logs: CloudWatchLogsClient;
let root: string;
let awsCli: string;
let player: InstancePlayer | undefined;
let events: LocalEvent[];

// A runner fake: records its arguments and pid where runnerEnv says, then holds while the
// hold file exists (a job that runs until the test lets it end).
const FAKE_RUNNER = `#!/bin/bash
printf '%s %s %s\\n' "$$" "$(id -un)" "$*" >>"$FAKE_RUNNER_LOG"
while [[ -e $FAKE_RUNNER_HOLD ]]; do sleep 0.1; done
`;

let runnerDir: string;
let runnerLog: string;
let runnerHold: string;

function settings(): LocalMachineSettings {
  return { prefix, awsEndpoint: moto.endpoint, sandboxRoot: join(root, 'machines'), slowdown: slowdown() };
}

function startPlayer(): InstancePlayer {
  events = [];
  player = new InstancePlayer({
    ec2,
    prefix,
    machine: settings(),
    awsCli,
    onEvent: (e) => events.push(e),
    runnerEnv: { FAKE_RUNNER_LOG: runnerLog, FAKE_RUNNER_HOLD: runnerHold },
    runnerDir,
    pollMs: 100,
  });
  player.start();
  return player;
}

/** Waits (bounded, a safety net scaled with the machine, not a measure) until `check` holds. */
async function until<T>(what: string, check: () => T | undefined | false | Promise<T | undefined | false>, ms = scaled(25_000)): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`${what} did not happen; events: ${JSON.stringify(events)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const eventOf = (kind: LocalEvent['kind'], id: string) => (): LocalEvent | undefined => events.find((e) => e.kind === kind && e.instanceId === id);

async function stateOf(id: string): Promise<string | undefined> {
  const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
  return out.Reservations?.[0]?.Instances?.[0]?.State?.Name;
}

async function paramExists(id: string): Promise<boolean> {
  try {
    await ssm.send(new GetParameterCommand({ Name: paths.runnerConfig(id), WithDecryption: true }));
    return true;
  } catch (error) {
    if ((error as Error).name === 'ParameterNotFound') return false;
    throw error;
  }
}

/** What scale-up writes for an activation: the config parameter first, then the tags. */
async function activate(id: string, config: RunnerConfig, traceId: string): Promise<void> {
  await ssm.send(new PutParameterCommand({ Name: paths.runnerConfig(id), Value: encodeRunnerConfig(config), Type: 'SecureString', Overwrite: false }));
  await ec2.send(
    new CreateTagsCommand({
      Resources: [id],
      Tags: [
        { Key: keys.activatedAt, Value: new Date().toISOString() },
        { Key: keys.traceId, Value: traceId },
        { Key: keys.jobId, Value: 'github:4242' },
      ],
    }),
  );
}

/** Processes of a played machine: every boot process carries LOCAL_INSTANCE_ID, the runner its log path. */
function processesOf(marker: string): number[] {
  return readdirSync('/proc')
    .filter((e) => /^\d+$/.test(e))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/environ`, 'latin1').split('\0').includes(marker);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Running, not a zombie (this container's init may not reap orphans). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function launchWarm(pool: string, launchTemplateId: string): Promise<string> {
  const out = await ec2.send(
    new RunInstancesCommand({
      MinCount: 1,
      MaxCount: 1,
      LaunchTemplate: { LaunchTemplateId: launchTemplateId, Version: '$Default' },
      TagSpecifications: [
        {
          ResourceType: 'instance',
          Tags: [
            { Key: keys.pool, Value: pool },
            { Key: keys.warmStandby, Value: WARM_STANDBY_VALUE },
            { Key: keys.createdBy, Value: CREATED_BY.pool },
          ],
        },
      ],
    }),
  );
  return out.Instances![0]!.InstanceId!;
}

beforeAll(async () => {
  moto = await startMoto();
  const common = { endpoint: moto.endpoint, region: 'us-east-1', credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' } };
  ec2 = new EC2Client(common);
  ssm = new SSMClient(common);
  logs = new CloudWatchLogsClient(common);
  root = mkdtempSync(join(tmpdir(), 'cwr-player-'));
  chmodSync(root, 0o755);
  awsCli = resolveAwsCli();
  runnerDir = join(root, 'runner-fakes');
  mkdirSync(runnerDir);
  writeFileSync(join(runnerDir, 'run.sh'), FAKE_RUNNER, { mode: 0o755 });
  writeFileSync(join(runnerDir, 'gitlab-runner'), FAKE_RUNNER, { mode: 0o755 });
  // The runner runs as nobody when the tests run as root: it must be able to write its log.
  runnerLog = join(root, 'runner.log');
  writeFileSync(runnerLog, '', { mode: 0o666 });
  chmodSync(runnerLog, 0o666);
  runnerHold = join(root, 'runner-hold');
});

// The group lib/runner-fleet.ts creates; the boot scripts ship into it (moto.reset() drops it).
beforeEach(async () => {
  await logs.send(new CreateLogGroupCommand({ logGroupName: bootLogGroupName(prefix) }));
});

afterEach(async () => {
  await player?.stop();
  player = undefined;
  rmSync(runnerHold, { force: true });
  // A new player would play the instances an earlier test left running.
  await moto.reset();
});

afterAll(async () => {
  ec2?.destroy();
  ssm?.destroy();
  logs?.destroy();
  await moto?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe('InstancePlayer', () => {
  it('primes and parks a warm standby, then runs its runner when activated, and it terminates itself', async () => {
    const lt = await createLocalLaunchTemplate(ec2, { name: 'warm-gh', provider: Provider.GITHUB }, settings());
    startPlayer();
    const id = await launchWarm('warm-gh', lt.launchTemplateId);

    const parked = await until('parked', eventOf('parked', id));
    expect(parked).toMatchObject({ pool: 'warm-gh', detail: `${prefix}-start-runner.service enabled` });
    expect(events.filter((e) => e.instanceId === id && e.kind === 'boot').map((e) => e.detail)).toEqual(['PRIME']);
    expect(await stateOf(id)).toBe('stopped');
    await player!.idle();
    expect(player!.booting()).toEqual([]);

    await activate(id, { provider: Provider.GITHUB, instanceId: id, jitConfig: 'fake-jit-config-1' }, 'trace-warm-1');
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));

    const gone = await until('instance-gone', eventOf('instance-gone', id));
    expect(gone).toMatchObject({ traceId: 'trace-warm-1', detail: 'terminated' });
    const run = events.find((e) => e.instanceId === id && e.kind === 'boot' && e.detail === 'RUN');
    expect(run).toMatchObject({ traceId: 'trace-warm-1' });
    const started = events.find((e) => e.instanceId === id && e.kind === 'runner-started');
    expect(started).toMatchObject({ provider: Provider.GITHUB, traceId: 'trace-warm-1' });
    expect(typeof started!.detail).toBe('number');
    expect(readFileSync(runnerLog, 'utf8')).toContain('--jitconfig fake-jit-config-1');
    expect(await stateOf(id)).toBe('terminated');
    expect(await paramExists(id)).toBe(false);
  });

  it('a cold instance launched by CreateFleet from gzipped user data waits for its config, then runs', async () => {
    const userData = renderLocalUserData({ name: 'cold-gl', provider: Provider.GITLAB }, settings());
    const lt = await ec2.send(
      new CreateLaunchTemplateCommand({
        LaunchTemplateName: `${prefix}-cold-gl`,
        LaunchTemplateData: { ImageId: LOCAL_IMAGE_ID, InstanceType: 't3.micro', UserData: gzipSync(userData).toString('base64') },
      }),
    );
    const subnet = (await ec2.send(new DescribeSubnetsCommand({}))).Subnets![0]!.SubnetId!;
    startPlayer();
    // As scale-up's cold path launches (lambdas/scale-up/cold.ts): no warm-standby tag.
    const fleet = await ec2.send(
      new CreateFleetCommand({
        Type: 'instant',
        LaunchTemplateConfigs: [{ LaunchTemplateSpecification: { LaunchTemplateId: lt.LaunchTemplate!.LaunchTemplateId!, Version: '$Default' }, Overrides: [{ SubnetId: subnet }] }],
        TargetCapacitySpecification: { TotalTargetCapacity: 1, DefaultTargetCapacityType: 'on-demand' },
        TagSpecifications: [
          {
            ResourceType: 'instance',
            Tags: [
              { Key: keys.pool, Value: 'cold-gl' },
              { Key: keys.createdBy, Value: CREATED_BY.scaleUp },
              { Key: keys.traceId, Value: 'trace-cold-1' },
              { Key: keys.activatedAt, Value: new Date().toISOString() },
            ],
          },
        ],
      }),
    );
    const id = fleet.Instances![0]!.InstanceIds![0]!;

    await until('WAIT', () => events.find((e) => e.instanceId === id && e.kind === 'boot' && e.detail === 'WAIT'));
    await ssm.send(
      new PutParameterCommand({
        Name: paths.runnerConfig(id),
        Value: encodeRunnerConfig({ provider: Provider.GITLAB, instanceId: id, url: 'http://127.0.0.1:1', token: 'fake-runner-token-1' }),
        Type: 'SecureString',
      }),
    );
    await until('instance-gone', eventOf('instance-gone', id));
    expect(events.filter((e) => e.instanceId === id && e.kind === 'boot').map((e) => e.detail)).toEqual(['WAIT', 'RUN']);
    expect(events.find((e) => e.instanceId === id && e.kind === 'runner-started')).toMatchObject({ provider: Provider.GITLAB, traceId: 'trace-cold-1' });
    expect(readFileSync(runnerLog, 'utf8')).toContain('run-single --url http://127.0.0.1:1 --token fake-runner-token-1');
    expect(events.some((e) => e.instanceId === id && e.kind === 'parked')).toBe(false);
  });

  it('a stalled PRIME stays priming, and stop() ends it and the runner of a running job', async () => {
    const lt = await createLocalLaunchTemplate(ec2, { name: 'stall-gh', provider: Provider.GITHUB }, settings());
    const p = startPlayer();
    p.stallNextPriming('stall-gh');
    const stalled = await launchWarm('stall-gh', lt.launchTemplateId);
    await until('PRIME', eventOf('boot', stalled));
    // Another instance of the pool primes normally: only the next one stalls.
    const normal = await launchWarm('stall-gh', lt.launchTemplateId);
    await until('parked', eventOf('parked', normal));
    // Settled: the stalled PRIME is the one boot still running, and it stays that way.
    await p.idle();
    expect(p.booting()).toEqual([stalled]);
    expect(await stateOf(stalled)).toBe('running');
    expect(events.some((e) => e.instanceId === stalled && e.kind === 'parked')).toBe(false);
    expect(processesOf(`LOCAL_INSTANCE_ID=${stalled}`).length).toBeGreaterThan(0);

    // A runner in the middle of its job.
    writeFileSync(runnerHold, '');
    await activate(normal, { provider: Provider.GITHUB, instanceId: normal, jitConfig: 'fake-jit-config-2' }, 'trace-hold-1');
    await ec2.send(new StartInstancesCommand({ InstanceIds: [normal] }));
    await until('runner-started', eventOf('runner-started', normal));
    const runnerPid = Number(await until('runner pid', () => /^(\d+) .*fake-jit-config-2/m.exec(readFileSync(runnerLog, 'utf8'))?.[1]));
    expect(alive(runnerPid)).toBe(true);
    expect(p.booting().sort()).toEqual([normal, stalled].sort());

    await p.stop();
    player = undefined;
    expect(processesOf(`LOCAL_INSTANCE_ID=${stalled}`)).toEqual([]);
    expect(processesOf(`LOCAL_INSTANCE_ID=${normal}`)).toEqual([]);
    expect(alive(runnerPid)).toBe(false);
    expect(existsSync(join(settings().sandboxRoot, stalled, 'stall-priming'))).toBe(true);
  }, scaled(60_000));

  it('an instance stopped from outside loses its processes without parking; a start with no enabled unit boots nothing', async () => {
    const lt = await createLocalLaunchTemplate(ec2, { name: 'outside-gh', provider: Provider.GITHUB }, settings());
    const p = startPlayer();
    p.stallPriming('i-none'); // another instance's stall does not touch this one
    p.stallNextPriming();
    const id = await launchWarm('outside-gh', lt.launchTemplateId);
    await until('PRIME', eventOf('boot', id));
    // PRIME enables the hook before its prepare commands, the first of which stalls.
    const wants = join(settings().sandboxRoot, id, MACHINE_PATHS.unitDir, 'multi-user.target.wants');
    await until('the hook enabled', () => existsSync(join(wants, `${prefix}-start-runner.service`)));
    expect(processesOf(`LOCAL_INSTANCE_ID=${id}`).length).toBeGreaterThan(0);

    await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    await until('its processes end', () => processesOf(`LOCAL_INSTANCE_ID=${id}`).length === 0);
    await p.idle();
    expect(p.booting()).toEqual([]);
    expect(events.some((e) => e.instanceId === id && e.kind === 'parked')).toBe(false);

    // As a RUN would, disable the hook.
    expect(readdirSync(wants)).toEqual([`${prefix}-start-runner.service`]);
    rmSync(wants, { recursive: true });
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    await until('running', async () => (await stateOf(id)) === 'running');
    await p.idle();
    expect(p.booting()).toEqual([]);
    expect(events.filter((e) => e.instanceId === id && e.kind === 'boot').map((e) => e.detail)).toEqual(['PRIME']);
    const consoleLog = join(settings().sandboxRoot, id, 'var/log/console.log');
    expect(readFileSync(consoleLog, 'utf8')).toContain('no enabled unit, nothing starts');

    // A unit whose program is missing: logged, and the player plays on.
    await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    // The player must see it stopped: a stop and a start between two polls look like nothing.
    await p.idle();
    const unitDir = join(settings().sandboxRoot, id, MACHINE_PATHS.unitDir);
    writeFileSync(join(unitDir, 'broken.service'), '[Service]\nExecStart=/nonexistent/hook\n');
    mkdirSync(wants);
    symlinkSync(join(unitDir, 'broken.service'), join(wants, 'broken.service'));
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    await until('the failed start', () => readFileSync(consoleLog, 'utf8').includes('could not start /nonexistent/hook'));
    await p.idle();
    expect(p.booting()).toEqual([]);
  });

  it('a start right after a stop from outside boots only once the old processes are gone', async () => {
    // A prepare command that ignores SIGTERM: the kill after the stop takes its whole grace
    // period, a start lands inside it, and the termed file says the kill has begun.
    const termed = join(root, 'termed');
    rmSync(termed, { force: true });
    const lt = await createLocalLaunchTemplate(
      ec2,
      { name: 'restart-gh', provider: Provider.GITHUB, prepareCommands: [`trap 'touch ${termed}' TERM; while true; do sleep 0.1; done`] },
      settings(),
    );
    const p = startPlayer();
    const id = await launchWarm('restart-gh', lt.launchTemplateId);
    await until('PRIME', eventOf('boot', id));
    const wants = join(settings().sandboxRoot, id, MACHINE_PATHS.unitDir, 'multi-user.target.wants');
    await until('the hook enabled', () => existsSync(join(wants, `${prefix}-start-runner.service`)));

    await ec2.send(new StopInstancesCommand({ InstanceIds: [id] }));
    await until('the kill begun', () => existsSync(termed));
    await ec2.send(new StartInstancesCommand({ InstanceIds: [id] }));
    const consoleLog = join(settings().sandboxRoot, id, 'var/log/console.log');
    const lines = await until('the second boot', () => {
      const all = readFileSync(consoleLog, 'utf8').split('\n');
      return all.filter((l) => l.startsWith('-- boot 2')).length >= 2 && all;
    });
    const boots = lines.flatMap((l, i) => (l.startsWith('-- boot 2') ? [i] : []));
    const firstExit = lines.findIndex((l) => l.startsWith('-- boot script exited'));
    // The first boot's script ended before the second boot began: never two boots of one machine.
    expect(firstExit).toBeGreaterThan(boots[0]!);
    expect(firstExit).toBeLessThan(boots[1]!);

    // The second boot's session is the player's to end: nothing of the machine outlives stop().
    await p.stop();
    player = undefined;
    expect(processesOf(`LOCAL_INSTANCE_ID=${id}`)).toEqual([]);
  }, scaled(60_000));

  it('updateLocalLaunchTemplate makes a new default version with the new rendering', async () => {
    const pool = { name: 'drift-gh', provider: Provider.GITHUB };
    const lt = await createLocalLaunchTemplate(ec2, pool, settings());
    expect(lt).toMatchObject({ launchTemplateName: `${prefix}-drift-gh`, version: '1' });
    const { version } = await updateLocalLaunchTemplate(ec2, lt.launchTemplateId, { ...pool, prepareCommands: ['echo drifted'] }, settings());
    expect(version).toBe('2');
    const described = await ec2.send(new DescribeLaunchTemplatesCommand({ LaunchTemplateIds: [lt.launchTemplateId] }));
    expect(described.LaunchTemplates?.[0]?.DefaultVersionNumber).toBe(2);
    const versions = await ec2.send(new DescribeLaunchTemplateVersionsCommand({ LaunchTemplateId: lt.launchTemplateId, Versions: ['1', '2'] }));
    const byVersion = new Map(versions.LaunchTemplateVersions?.map((v) => [v.VersionNumber, v.LaunchTemplateData]));
    expect(decodeUserData(byVersion.get(1)!.UserData!)).not.toContain('echo drifted');
    expect(decodeUserData(byVersion.get(2)!.UserData!)).toBe(renderLocalUserData({ ...pool, prepareCommands: ['echo drifted'] }, settings()));
    // The bytes production puts there (lib/runner-fleet.ts): gzip, then base64.
    expect(byVersion.get(2)!.UserData).toBe(encodeUserData(renderLocalUserData({ ...pool, prepareCommands: ['echo drifted'] }, settings())));
    expect(byVersion.get(2)).toMatchObject({
      MetadataOptions: { HttpTokens: 'required', InstanceMetadataTags: 'enabled' },
      InstanceInitiatedShutdownBehavior: 'stop',
    });
  });
});

