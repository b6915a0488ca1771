/**
 * Plays the instances moto reports as if they were machines: every instance of the fleet
 * (tagged with the pool tag) that enters `running` boots in its own sandbox directory with
 * its own loopback IMDS server, running the real rendered boot script.
 *
 * - First boot (no machine directory yet): the instance's user data, as a file, like
 *   cloud-init. Later boots (started from stopped): the units enabled in the machine's unit
 *   directory, like systemd, which is the hook PRIME installed.
 * - A machine's processes are one session. `shutdown`/`poweroff` (shims) call back here: the
 *   instance is stopped in moto (shutdown behaviour "stop") and its processes are killed.
 *   When moto reports an instance being played as stopped or terminated (the script's own
 *   terminate-instances, scale-down, the pool's eviction), its processes are killed too.
 * - Events: `boot` (detail: the mode, from the boot log), `runner-installed` (detail: the
 *   version), `runner-started` (detail: the activation latency, when the boot logged one),
 *   `boot-failed` (detail: the boot's last two error lines), `parked`, `instance-gone`.
 * - A stock image (`stockRunnerUser`): the machine has no runner and no runner user, so the
 *   boot's install step puts them there; otherwise the runner binaries are in place (prebuilt).
 *   An instance of one of `aptImages` is an Ubuntu-style machine: its install step uses apt-get.
 *
 * The user data comes from the instance's own `userData` attribute, which is what cloud-init
 * reads on EC2 (through IMDS). moto copies the launch template version's user data into it
 * for RunInstances and CreateFleet alike, where it tags only RunInstances' instances with
 * `aws:ec2launchtemplate:id`/`:version`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, chmodSync, existsSync, mkdirSync, writeFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import {
  DescribeInstanceAttributeCommand,
  DescribeInstancesCommand,
  StopInstancesCommand,
  type EC2Client,
  type Instance,
} from '@aws-sdk/client-ec2';
import { BOOT_LOG_KEYS, BOOT_MODES, LEDGER_LOG_KEYS, PROVIDERS, WARM_STANDBY_VALUE, tagKeys, type TagKeys } from '../../lambdas/shared/contract';
import type { EventSink, LocalEvent } from '../events';
import { ImdsServer, listenOnLoopback } from './imds';
import { decodeUserData } from '../../lib/user-data';
import { relocateUserData, type LocalMachineSettings } from './launch-templates';
import { playedUserName, removeHostUser } from './runner-users';
import { createMachine, DEFAULT_RUNNER_DIR, enabledUnits, killSession, machineAt, sessionPids, type Machine } from './machine';

export interface InstancePlayerOptions {
  ec2: EC2Client; // moto
  prefix: string;
  machine: LocalMachineSettings;
  /** Resolved path of the real aws CLI. */
  awsCli: string;
  onEvent: EventSink;
  /** Extra env for the fake runners (e.g. LOCAL_RUNNER_LOG). */
  runnerEnv?: Record<string, string>;
  /** How often moto is polled. @default 200 */
  pollMs?: number;
  /** Directory of the runner binaries copied into each machine. @default local/runner */
  runnerDir?: string;
  /**
   * Play a stock image: no runner binaries in place and this runner user unknown until the
   * boot's install step creates it. `runnerDir` and `runnerEnv` are then unused.
   * @default - a prebuilt image with the runner binaries of `runnerDir`
   */
  stockRunnerUser?: string;
  /** A reusable pool's machines: the runner user's home is created, owned by this user (MachineOptions.homeOwner). */
  runnerHomeOwner?: string;
  /**
   * Each machine gets a runner user of its own (runner-users.ts), named with this prefix and its
   * instance id: the templates name `RUNNER_USER_PLACEHOLDER` (LocalMachineSettings.runnerUser),
   * which each machine's relocation replaces; a stock image's install step creates the user, a
   * prebuilt image has it; `stop()` removes them all. Needs root. `runnerHomeOwner` is then unused.
   * @default - the machines share the rendered runner user
   */
  ownRunnerUsers?: string;
  /** The run's own Docker daemon, for every machine (MachineOptions.dockerHost). @default - none */
  dockerHost?: string;
  /**
   * Images whose instances play an Ubuntu-style machine: no dnf, this host's real apt-get
   * (MachineOptions.apt; launch-templates.ts LOCAL_APT_IMAGE_ID). @default - none
   */
  aptImages?: readonly string[];
}

interface Boot {
  readonly child: ChildProcess;
  /** The boot's session id (its pid: it is spawned detached, so it calls setsid). */
  readonly sid: number;
  readonly exited: Promise<void>;
}

interface Played {
  readonly id: string;
  readonly machine: Machine;
  readonly imds: ImdsServer;
  readonly imdsUrl: string;
  pool?: string;
  /** Booted in this running period: set at boot, cleared when moto reports it stopped. */
  up: boolean;
  boot?: Boot;
  /** The sessions of this machine's boots that may still have processes. */
  sessions: Set<number>;
  poweringOff: boolean;
  /** Its processes are being killed after a stop from outside: no new boot until they are gone. */
  poweringDown: boolean;
  gone: boolean;
  stalled: boolean;
  /** From the boot log of the current boot. */
  traceId?: string;
  latency?: number;
  /** The current boot's error lines, the last few. */
  errors: string[];
}

/** Polls in a row that failed before idle() gives up: moto is gone or broken, nothing would settle. */
export const IDLE_FAILING_TICKS = 10;

/** How long a read of an instance's tags answers its IMDS: short, so scale-up's tags show at once. */
const TAG_CACHE_MS = 100;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const logValue = (key: string): RegExp => new RegExp(`(?:^|\\s)${escape(key)}=(\\S+)`);
const MODE_RE = new RegExp(`(?:^|\\s)${escape(BOOT_LOG_KEYS.mode)}=(${BOOT_MODES.join('|')})(?:\\s|$)`);
const TRACE_RE = logValue(BOOT_LOG_KEYS.traceId);
const STAGE_RE = logValue(LEDGER_LOG_KEYS.stage);
const STAGE_SECONDS_RE = new RegExp(`(?:^|\\s)${escape(LEDGER_LOG_KEYS.seconds)}=(-?\\d+(?:\\.\\d+)?)(?:\\s|$)`);
const LATENCY_RE = new RegExp(`(?:^|\\s)${escape(BOOT_LOG_KEYS.activationLatency)}=(-?\\d+(?:\\.\\d+)?)(?:\\s|$)`);
// The boot script's own wording (templates/start-runner.sh run_mode, on_exit; install-runner.sh),
// not contract keys.
const RUNNER_START_RE = new RegExp(`starting the (${PROVIDERS.join('|')}) runner$`);
const INSTALLED_RE = new RegExp(`installed the (?:${PROVIDERS.join('|')}) runner (\\S+)$`);
const FAILED_RE = /failed \(status \d+\).*: (?:not powering off|not terminating|left for the pool to evict|terminating)$/;
// An error line, or the install step's line that says why a download was refused.
const ERROR_RE = /\s(?:error: (.*)|((?:SHA-256|download) of \S+ .*))$/;

/** What the player knows of an instance it plays. */
export interface PlayedView {
  /** Booted in this running period. */
  readonly up: boolean;
  readonly gone: boolean;
  readonly poweringOff: boolean;
  readonly poweringDown: boolean;
}

export type PlayerAction = 'boot' | 'power-down' | 'gone' | 'none';

/**
 * What to do about one instance, from moto's state and what the player knows of it (nothing
 * when it never played it). An instance seen running that is not up boots; a played one that
 * is stopped while up was stopped from outside (its own power-off clears `up` first) and
 * loses its processes; a played one that is terminated is gone. A power-off in progress
 * owns the instance until it is done, and so does the kill after a stop from outside (a start
 * right after it would otherwise boot the machine while its old processes still run).
 */
export function decideAction(state: string | undefined, played: PlayedView | undefined): PlayerAction {
  if (played?.gone || played?.poweringOff || played?.poweringDown) return 'none';
  switch (state) {
    case 'pending':
    case 'running':
      return played?.up ? 'none' : 'boot';
    case 'stopping':
    case 'stopped':
      return played?.up ? 'power-down' : 'none';
    case 'shutting-down':
    case 'terminated':
      return played ? 'gone' : 'none';
    default:
      return 'none';
  }
}

export interface BootLine {
  readonly mode?: string;
  readonly traceId?: string;
  readonly latency?: number;
  /** The provider whose runner the boot is starting. */
  readonly runnerStarting?: string;
  /** The version of the runner the install step has just installed. */
  readonly installed?: string;
  /** The boot failed (the start logic's exit line). */
  readonly failed?: boolean;
  /** The text of an error line. */
  readonly error?: string;
  /** A latency ledger line's stage and seconds since activation (contract ledger.ts). */
  readonly stage?: string;
  readonly stageSeconds?: number;
}

/** What a boot-log line says, by the contract's BOOT_LOG_KEYS. */
export function parseBootLine(line: string): BootLine {
  const mode = MODE_RE.exec(line)?.[1];
  const traceId = TRACE_RE.exec(line)?.[1];
  const latency = LATENCY_RE.exec(line)?.[1];
  const runnerStarting = RUNNER_START_RE.exec(line)?.[1];
  const installed = INSTALLED_RE.exec(line)?.[1];
  const stage = STAGE_RE.exec(line)?.[1];
  const stageSeconds = STAGE_SECONDS_RE.exec(line)?.[1];
  const errorMatch = ERROR_RE.exec(line);
  const error = errorMatch?.[1] ?? errorMatch?.[2];
  return {
    ...(installed ? { installed } : {}),
    ...(FAILED_RE.test(line) ? { failed: true } : {}),
    ...(error ? { error } : {}),
    ...(mode ? { mode } : {}),
    ...(traceId ? { traceId } : {}),
    ...(latency ? { latency: Number(latency) } : {}),
    ...(runnerStarting ? { runnerStarting } : {}),
    ...(stage && stageSeconds ? { stage, stageSeconds: Number(stageSeconds) } : {}),
  };
}

export class InstancePlayer {
  private readonly keys: TagKeys;
  private readonly pollMs: number;
  private readonly played = new Map<string, Played>();
  private readonly stallIds = new Set<string>();
  private readonly stallNext: (string | undefined)[] = [];
  private readonly pending = new Set<Promise<unknown>>();
  private readonly control: Server;
  private listening?: Promise<void>;
  /** Where the power-off shims call back. */
  private controlUrl = '';
  private loop?: Promise<void>;
  private running = false;
  private ticks = 0;
  private lastTickActed = true;
  private lastError = '';
  private readonly tagCache = new Map<string, { at: number; tags: Promise<Record<string, string>> }>();
  /** Polls of moto in a row that failed: idle() gives up at IDLE_FAILING_TICKS. */
  private failingTicks = 0;

  constructor(private readonly opts: InstancePlayerOptions) {
    this.keys = tagKeys(opts.prefix);
    this.pollMs = opts.pollMs ?? 200;
    this.control = createServer((req, res) => {
      const match = /^\/power-off\/(i-[0-9a-f]+)$/.exec(req.url ?? '');
      const p = match ? this.played.get(match[1]!) : undefined;
      if (req.method !== 'POST' || !p || p.gone) {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(202).end();
      this.track(this.powerOff(p));
    });
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    mkdirSync(this.opts.machine.sandboxRoot, { recursive: true });
    // The runner user (nobody, when root plays) must reach its machine's runner directory.
    chmodSync(this.opts.machine.sandboxRoot, 0o755);
    this.listening = listenOnLoopback(this.control).then((url) => {
      this.controlUrl = url;
    });
    this.loop = this.run();
    process.on('exit', this.killAllNow);
  }

  /** On the way out of a process that did not stop the player: no machine outlives it. */
  private readonly killAllNow = (): void => {
    for (const p of this.played.values()) {
      for (const sid of p.sessions) {
        for (const pid of sessionPids(sid)) {
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            // gone meanwhile
          }
        }
      }
    }
    try {
      this.removeRunnerUsers();
    } catch {
      // on the way out: the next run reaps them (runner-users.ts reapStrandedPlayedUsers)
    }
  };

  /** The runner users made for its machines (`ownRunnerUsers`), whether or not their install step ran. */
  runnerUsers(): string[] {
    const prefix = this.opts.ownRunnerUsers;
    return prefix === undefined ? [] : [...this.played.keys()].map((id) => playedUserName(prefix, id));
  }

  /** Removes every machine's own runner user from this host (its processes are gone by then). */
  private removeRunnerUsers(): void {
    let first: unknown;
    for (const user of this.runnerUsers()) {
      try {
        removeHostUser(user);
      } catch (error) {
        first ??= error;
      }
    }
    if (first) throw first instanceof Error ? first : new Error(String(first));
  }

  /** Kills every process it started and waits for them; closes its servers; removes the machines' users. */
  async stop(): Promise<void> {
    this.running = false;
    await this.loop;
    await Promise.allSettled([...this.pending]);
    // Every machine gets its kill and every server closes even when one kill fails (a leaked
    // port otherwise); the first failure is thrown after.
    const killed = await Promise.allSettled([...this.played.values()].map((p) => this.powerDown(p)));
    await Promise.allSettled([...this.played.values()].map((p) => p.imds.close()));
    this.control.closeAllConnections();
    if (this.listening) await new Promise<void>((r) => this.control.close(() => r()));
    process.off('exit', this.killAllNow);
    const failed = killed.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    this.removeRunnerUsers();
    if (failed) throw failed.reason;
  }

  /** That instance's PRIME never finishes (its first prepare command blocks). */
  stallPriming(instanceId: string): void {
    this.stallIds.add(instanceId);
    const p = this.played.get(instanceId);
    if (p) this.markStalled(p);
  }

  /** The next instance that primes (optionally of a pool) stalls. */
  stallNextPriming(pool?: string): void {
    this.stallNext.push(pool);
  }

  /** Instance ids whose boot script is running now. */
  booting(): string[] {
    return [...this.played.values()].filter((p) => p.boot).map((p) => p.id);
  }

  /**
   * Resolves when no boot script runs (a stalled PRIME aside: it never ends) and two polls in
   * a row found nothing to do.
   */
  async idle(): Promise<void> {
    for (;;) {
      if (this.failingTicks >= IDLE_FAILING_TICKS) {
        throw new Error(`instance player: ${this.failingTicks} polls of moto in a row failed, last: ${this.lastError}`);
      }
      if (this.quiet()) {
        const seen = this.ticks;
        while (this.running && this.ticks < seen + 2) await sleep(this.pollMs / 2);
        if (!this.running || this.quiet()) return;
      }
      await sleep(this.pollMs);
    }
  }

  private quiet(): boolean {
    return !this.lastTickActed && this.pending.size === 0 && [...this.played.values()].every((p) => !p.boot || p.stalled);
  }

  private track(work: Promise<unknown>): void {
    const p = work.catch((error: unknown) => this.report(error)).finally(() => this.pending.delete(p));
    this.pending.add(p);
  }

  private report(error: unknown): void {
    const message = error instanceof Error ? error.message : String(error);
    if (message === this.lastError) return;
    this.lastError = message;
    console.error(`instance player: ${message}`);
  }

  private emit(p: Played, event: Omit<LocalEvent, 't' | 'instanceId' | 'pool'>): void {
    this.opts.onEvent({ t: Date.now(), instanceId: p.id, ...(p.pool ? { pool: p.pool } : {}), ...event });
  }

  private async run(): Promise<void> {
    await this.listening;
    while (this.running) {
      try {
        this.lastTickActed = await this.tick();
        this.failingTicks = 0;
      } catch (error) {
        this.lastTickActed = true;
        this.failingTicks += 1;
        this.report(error);
      }
      this.ticks += 1;
      if (this.running) await sleep(this.pollMs);
    }
  }

  private async describe(): Promise<Instance[]> {
    const instances: Instance[] = [];
    let token: string | undefined;
    do {
      const out = await this.opts.ec2.send(
        new DescribeInstancesCommand({
          // Terminated instances stay listed for a while (an hour on EC2); those are gone, or
          // are noticed as gone by their absence (tick).
          Filters: [
            { Name: 'tag-key', Values: [this.keys.pool] },
            { Name: 'instance-state-name', Values: ['pending', 'running', 'stopping', 'stopped', 'shutting-down'] },
          ],
          ...(token ? { NextToken: token } : {}),
        }),
      );
      for (const r of out.Reservations ?? []) instances.push(...(r.Instances ?? []));
      token = out.NextToken;
    } while (token);
    return instances;
  }

  /** One look at moto; true when it acted on something. */
  private async tick(): Promise<boolean> {
    let acted = false;
    const listed = await this.describe();
    const live = new Set(listed.map((i) => i.InstanceId));
    // A played instance no longer listed was terminated since the last poll.
    const vanished = [...this.played.values()].filter((p) => !p.gone && !live.has(p.id)).map((p): Instance => ({ InstanceId: p.id, State: { Name: 'terminated' } }));
    for (const instance of [...listed, ...vanished]) {
      const id = instance.InstanceId;
      const p = id ? this.played.get(id) : undefined;
      const action = decideAction(instance.State?.Name, p);
      if (action === 'none') continue;
      acted = true;
      try {
        await this.act(action, instance, p);
      } catch (error) {
        // One instance's trouble must not hold up the others.
        this.report(error);
      }
    }
    return acted;
  }

  private async act(action: Exclude<PlayerAction, 'none'>, instance: Instance, p: Played | undefined): Promise<void> {
    if (action === 'boot') return this.bootInstance(instance, p);
    if (!p) return;
    p.up = false;
    if (action === 'power-down') {
      // Stopped by someone else than its own power-off: the same end for its processes.
      p.poweringDown = true;
      this.track(
        this.powerDown(p).finally(() => {
          p.poweringDown = false;
        }),
      );
      return;
    }
    p.gone = true;
    const state = instance.State?.Name;
    this.track(
      this.powerDown(p).then(async () => {
        this.emit(p, { kind: 'instance-gone', ...(state ? { detail: state } : {}), ...(p.traceId ? { traceId: p.traceId } : {}) });
        await p.imds.close();
      }),
    );
  }

  private tagsOf(instance: Instance): Record<string, string> {
    return Object.fromEntries((instance.Tags ?? []).flatMap((t) => (t.Key && t.Value !== undefined ? [[t.Key, t.Value]] : [])));
  }

  /**
   * The instance's tags for its IMDS, read from moto at most every TAG_CACHE_MS: a boot asks
   * for several tags in a row, each would otherwise be a DescribeInstances.
   */
  private liveTags(id: string): Promise<Record<string, string>> {
    const cached = this.tagCache.get(id);
    if (cached && Date.now() - cached.at < TAG_CACHE_MS) return cached.tags;
    const tags = this.readTags(id);
    this.tagCache.set(id, { at: Date.now(), tags });
    // A failed read is not kept: the next request asks again.
    tags.catch(() => this.tagCache.get(id)?.tags === tags && this.tagCache.delete(id));
    return tags;
  }

  private async readTags(id: string): Promise<Record<string, string>> {
    const out = await this.opts.ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
    const instance = out.Reservations?.[0]?.Instances?.[0];
    if (!instance) throw new Error(`moto does not know ${id}`);
    // EC2's own aws:* tags are not shown in instance metadata.
    return Object.fromEntries(Object.entries(this.tagsOf(instance)).filter(([k]) => !k.startsWith('aws:')));
  }

  private async register(id: string): Promise<Played> {
    const imds = new ImdsServer({ liveTags: () => this.liveTags(id) });
    imds.state.instanceId = id;
    imds.state.region = await this.opts.ec2.config.region();
    const p: Played = {
      id,
      machine: machineAt(join(this.opts.machine.sandboxRoot, id)),
      imds,
      imdsUrl: await imds.listen(),
      up: false,
      sessions: new Set(),
      poweringOff: false,
      poweringDown: false,
      gone: false,
      stalled: false,
      errors: [],
    };
    this.played.set(id, p);
    return p;
  }

  private markStalled(p: Played): void {
    p.stalled = true;
    if (existsSync(p.machine.dir)) writeFileSync(p.machine.stallMarker, '');
  }

  /** Whether this boot is one that will prime: a warm standby not activated. */
  private consumeStall(p: Played, tags: Record<string, string>): void {
    if (this.stallIds.has(p.id)) return this.markStalled(p);
    if (tags[this.keys.warmStandby] !== WARM_STANDBY_VALUE || tags[this.keys.activatedAt] !== undefined) return;
    const i = this.stallNext.findIndex((pool) => pool === undefined || pool === p.pool);
    if (i < 0) return;
    this.stallNext.splice(i, 1);
    this.stallIds.add(p.id);
    this.markStalled(p);
  }

  private async bootInstance(instance: Instance, known: Played | undefined): Promise<void> {
    const id = instance.InstanceId!;
    const p = known ?? (await this.register(id));
    const tags = this.tagsOf(instance);
    p.pool = tags[this.keys.pool];
    p.traceId = undefined;
    p.latency = undefined;
    p.errors = [];
    let script: string;
    if (!existsSync(p.machine.dir)) {
      // First boot: cloud-init runs the user data once per instance; the machine directory
      // is its semaphore. A failed read of the user data is retried at the next poll; a
      // machine that cannot be built stays up without a boot, like one whose cloud-init broke.
      const attr = await this.opts.ec2.send(new DescribeInstanceAttributeCommand({ InstanceId: id, Attribute: 'userData' }));
      p.up = true;
      const base64 = attr.UserData?.Value;
      if (!base64) throw new Error(`${id} has no user data: nothing to boot`);
      const user = this.opts.ownRunnerUsers === undefined ? undefined : playedUserName(this.opts.ownRunnerUsers, id);
      const userData = relocateUserData(decodeUserData(base64), p.machine.dir, p.imdsUrl, user);
      createMachine({
        dir: p.machine.dir,
        instanceId: id,
        awsCli: this.opts.awsCli,
        ...(this.opts.dockerHost !== undefined ? { dockerHost: this.opts.dockerHost } : {}),
        ...(instance.ImageId !== undefined && this.opts.aptImages?.includes(instance.ImageId) ? { apt: true } : {}),
        ...(user !== undefined ? { playedUser: user } : this.opts.runnerHomeOwner === undefined ? {} : { homeOwner: this.opts.runnerHomeOwner }),
        ...(this.opts.stockRunnerUser !== undefined
          ? { stockRunnerUser: user ?? this.opts.stockRunnerUser }
          : { runnerSource: this.opts.runnerDir ?? DEFAULT_RUNNER_DIR, ...(this.opts.runnerEnv ? { runnerEnv: this.opts.runnerEnv } : {}) }),
      });
      writeFileSync(p.machine.userDataFile, userData, { mode: 0o700 });
      script = p.machine.userDataFile;
    } else {
      p.up = true;
      // A later boot: what systemd starts, the units enabled in multi-user.target.wants.
      const unit = enabledUnits(p.machine)[0];
      if (!unit) {
        appendFileSync(p.machine.consoleLog, `-- boot ${new Date().toISOString()}: no enabled unit, nothing starts\n`);
        return;
      }
      script = unit.execStart;
    }
    if (p.stalled) p.stalled = false;
    rmSync(p.machine.stallMarker, { force: true });
    this.consumeStall(p, tags);
    p.boot = this.spawnBoot(p, script);
  }

  private spawnBoot(p: Played, script: string): Boot {
    const m = p.machine;
    appendFileSync(m.consoleLog, `-- boot ${new Date().toISOString()}: ${script}\n`);
    // The environment cloud-init or systemd gives (test/templates/helpers.bash boot_env): the
    // shims and the real aws CLI first on PATH, no AWS credentials or config of the host.
    const env: Record<string, string> = {
      PATH: `${m.binDir}:${process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'}`,
      HOME: process.env.HOME ?? '/root',
      LANG: 'C.UTF-8',
      TMPDIR: join(m.dir, 'tmp'),
      AWS_CONFIG_FILE: join(m.dir, 'aws/config'),
      AWS_SHARED_CREDENTIALS_FILE: join(m.dir, 'aws/credentials'),
      SHIM_UNIT_DIR: m.unitDir,
      SHIM_CALLS: m.callsDir,
      LOCAL_INSTANCE_ID: p.id,
    };
    if (process.env.PYENV_ROOT) env.PYENV_ROOT = process.env.PYENV_ROOT;
    const child = spawn(script, [], { cwd: '/', detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...env, LOCAL_PLAYER_URL: this.controlUrl } });
    // A hook that is not executable: systemd would log the failure and boot on without it.
    child.on('error', (error) => appendFileSync(m.consoleLog, `-- could not start ${script}: ${error.message}\n`));
    if (child.pid === undefined) throw new Error(`could not start ${script} for ${p.id}`);
    const sid = child.pid;
    p.sessions.add(sid);
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream! }).on('line', (line) => this.onLine(p, line));
    }
    const exited = new Promise<void>((resolve) => {
      child.once('exit', (code, signal) => {
        appendFileSync(m.consoleLog, `-- boot script exited: ${signal ?? code}\n`);
        if (p.boot?.child === child) p.boot = undefined;
        resolve();
      });
    });
    return { child, sid, exited };
  }

  private onLine(p: Played, line: string): void {
    appendFileSync(p.machine.consoleLog, `${line}\n`);
    const parsed = parseBootLine(line);
    if (parsed.traceId) p.traceId = parsed.traceId;
    if (parsed.latency !== undefined) p.latency = parsed.latency;
    const traceId = p.traceId ? { traceId: p.traceId } : {};
    if (parsed.mode) this.emit(p, { kind: 'boot', detail: parsed.mode, ...traceId });
    if (parsed.stage && parsed.stageSeconds !== undefined) this.emit(p, { kind: 'stage', detail: parsed.stage, seconds: parsed.stageSeconds, ...traceId });
    if (parsed.error) p.errors = [...p.errors, parsed.error].slice(-2);
    if (parsed.installed) this.emit(p, { kind: 'runner-installed', detail: parsed.installed, ...traceId });
    if (parsed.failed) this.emit(p, { kind: 'boot-failed', detail: p.errors.length ? p.errors.join('; ') : line, ...traceId });
    if (parsed.runnerStarting) {
      this.emit(p, { kind: 'runner-started', provider: parsed.runnerStarting, ...traceId, ...(p.latency === undefined ? {} : { detail: p.latency }) });
    }
  }

  /** The machine powers itself off: stopped in moto, then its processes end. */
  private async powerOff(p: Played): Promise<void> {
    p.poweringOff = true;
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          await this.opts.ec2.send(new StopInstancesCommand({ InstanceIds: [p.id] }));
          break;
        } catch (error) {
          if (attempt >= 3) throw new Error(`StopInstances ${p.id} after its power-off failed: ${String(error)}`);
          await sleep(200 * attempt);
          // A call that failed on the way back may have stopped it: retry only if it still runs.
          if (await this.stoppingOrStopped(p.id)) break;
        }
      }
      p.up = false;
      await this.powerDown(p);
      const unit = enabledUnits(p.machine)[0];
      this.emit(p, { kind: 'parked', detail: unit ? `${unit.name} enabled` : 'no unit enabled' });
    } finally {
      p.poweringOff = false;
    }
  }

  private async stoppingOrStopped(id: string): Promise<boolean> {
    try {
      const out = await this.opts.ec2.send(new DescribeInstancesCommand({ InstanceIds: [id] }));
      const state = out.Reservations?.[0]?.Instances?.[0]?.State?.Name;
      return state === 'stopping' || state === 'stopped';
    } catch {
      return false; // unknown: the retry decides
    }
  }

  /** Ends every process of the machine's boots so far (a later boot's session is not its to forget). */
  private async powerDown(p: Played): Promise<void> {
    const boot = p.boot;
    const sessions = [...p.sessions];
    await Promise.all(sessions.map((sid) => killSession(sid)));
    if (boot) await boot.exited;
    for (const sid of sessions) p.sessions.delete(sid);
  }
}
