/**
 * The benchmark's Lambda containers: one child process each (bench/activation/container.ts),
 * so a CPU limit holds the scale-up invocations and nothing else (moto, which plays AWS, and
 * this process, which plays the account's request buckets, run free). Each container serves
 * one invocation at a time, as Lambda's do; every container paces its requests through the
 * one Pacer held here, standing for the account's buckets.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import type { FleetConfig } from '../../lambdas/shared/contract';
import type { Pacer } from '../../lambdas/shared/pacing';
import type { Calibration } from '../calibrate';
import type { CpuLimit } from '../cpu-limit';
import type { RecordedRequest } from './model';

export type ToContainer =
  | { readonly t: 'calibrate' }
  | {
      readonly t: 'invoke';
      readonly invocation: number;
      readonly jobs: readonly number[];
      /** 1 for a first delivery; more for a batch the event source hands out again after a failure. */
      readonly receiveCount: number;
      readonly config: FleetConfig;
      readonly batching: boolean;
      /** Actions the pacer holds a bucket for; the others are sent without asking. */
      readonly paced: readonly string[];
    }
  | { readonly t: 'grant'; readonly id: number };

export type FromContainer =
  | { readonly t: 'ready' }
  | ({ readonly t: 'calibrated' } & Calibration)
  | { readonly t: 'take'; readonly id: number; readonly action: string }
  | {
      readonly t: 'invoked';
      readonly invocation: number;
      readonly requests: RecordedRequest[];
      readonly lostClaims: number;
      /** Log messages off the normal path (warnings, errors, lost claims), counted. */
      readonly events: Record<string, number>;
      readonly failures: readonly string[];
      /** Wall and CPU time of the invocation inside the container. */
      readonly wallMs: number;
      readonly cpuMs: number;
    };

export type Invoked = Extract<FromContainer, { t: 'invoked' }>;

const SCRIPT = join(__dirname, 'container.ts');
const SILENCE_MS = 10 * 60_000;

export class Container {
  private pacer: Pacer | undefined;
  private waiting: { resolve: (m: FromContainer) => void; reject: (e: Error) => void } | undefined;
  private readonly exited: Promise<void>;
  /** Why the container is gone, once it is: every later call fails with it instead of waiting. */
  private gone: Error | undefined;

  private constructor(
    private readonly child: ChildProcess,
    private readonly limit: CpuLimit | undefined,
  ) {
    child.on('message', (m: FromContainer) => {
      if (m.t === 'take') {
        void this.grant(m.id, m.action);
        return;
      }
      const w = this.waiting;
      this.waiting = undefined;
      w?.resolve(m);
    });
    // A container that dies mid-run is a fault of the benchmark or the handler, not a figure:
    // the call waiting on it (and any later one) fails, and the run stops with the reason.
    // A process that could not start fails the start; other errors (a send to a channel that
    // is closing) are the exit's to report.
    child.on('error', (error) => {
      if (child.pid !== undefined) return;
      this.gone = new Error(`container did not start: ${error.message}`);
      const w = this.waiting;
      this.waiting = undefined;
      w?.reject(this.gone);
    });
    this.exited = new Promise((resolve) =>
      child.once('exit', (code, signal) => {
        this.gone = new Error(`container ${child.pid ?? '?'} exited (${signal ?? `code ${code}`}${signal === 'SIGKILL' ? `: killed, or silent for ${SILENCE_MS / 1000} s` : ''})`);
        const w = this.waiting;
        this.waiting = undefined;
        w?.reject(this.gone);
        resolve();
      }),
    );
  }

  /** Starts a container (under `limit`, if given) and waits until its modules are loaded. */
  static async start(endpoint: string, limit?: CpuLimit): Promise<Container> {
    const execArgv = ['--import', 'tsx'];
    const child = limit
      ? limit.spawn(process.execPath, [...execArgv, SCRIPT, endpoint], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] })
      : fork(SCRIPT, [endpoint], { execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const c = new Container(child, limit);
    const first = await c.next();
    if (first.t !== 'ready') throw new Error(`container did not start: ${JSON.stringify(first)}`);
    return c;
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  async calibrate(): Promise<Calibration> {
    this.send({ t: 'calibrate' });
    const m = await this.next();
    if (m.t !== 'calibrated') throw new Error(`unexpected answer to calibrate: ${m.t}`);
    return { wallMs: m.wallMs, cpuMs: m.cpuMs };
  }

  async invoke(pacer: Pacer, request: Omit<Extract<ToContainer, { t: 'invoke' }>, 't'>): Promise<Invoked> {
    this.pacer = pacer;
    this.send({ t: 'invoke', ...request });
    const m = await this.next();
    if (m.t !== 'invoked') throw new Error(`unexpected answer to invoke: ${m.t}`);
    return m;
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      if (this.child.connected) this.child.disconnect();
      else this.child.kill('SIGTERM');
      const killer = setTimeout(() => this.child.kill('SIGKILL'), 5_000);
      await this.exited;
      clearTimeout(killer);
    }
    await this.limit?.close();
  }

  private async grant(id: number, action: string): Promise<void> {
    await this.pacer?.take(action);
    // A grant for a container gone meanwhile goes nowhere; the invocation's caller has its error.
    if (!this.gone) this.send({ t: 'grant', id });
  }

  private send(m: ToContainer): void {
    if (this.gone) throw this.gone;
    if (this.child.connected) this.child.send(m);
  }

  private next(): Promise<FromContainer> {
    if (this.gone) return Promise.reject(this.gone);
    // A hang catcher: an invocation of 10 jobs takes seconds, even at 128 MB's share. A
    // container silent this long is killed, and its exit fails the run.
    return new Promise((resolve, reject) => {
      const silent = setTimeout(() => this.child.kill('SIGKILL'), SILENCE_MS);
      const settle = () => clearTimeout(silent);
      this.waiting = {
        resolve: (m) => (settle(), resolve(m)),
        reject: (e) => (settle(), reject(e)),
      };
    });
  }
}
