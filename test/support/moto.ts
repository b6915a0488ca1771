import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { scaled } from './slowdown';

/** A moto server on a free loopback port, started and stopped by the test that needs it. */
export interface MotoServer {
  readonly endpoint: string;
  readonly port: number;
  /** The server's process id (a benchmark gives it CPU weight). */
  readonly pid: number | undefined;
  /** Clears all state (moto's reset API) so tests sharing one server start clean. */
  reset(): Promise<void>;
  stop(): Promise<void>;
}

/** Environment for AWS SDK v3 clients and the aws CLI pointed at moto, with dummy credentials. */
export function motoEnv(endpoint: string): Record<string, string> {
  return {
    AWS_ENDPOINT_URL: endpoint,
    AWS_ACCESS_KEY_ID: 'testing',
    AWS_SECRET_ACCESS_KEY: 'testing',
    AWS_REGION: 'us-east-1',
    AWS_DEFAULT_REGION: 'us-east-1',
  };
}

export async function startMoto(): Promise<MotoServer> {
  // Its own process group: a terminal's Ctrl-C (SIGINT to the foreground group) must not kill
  // moto under a parent that still needs it to stop cleanly; the parent ends it (stop(), or
  // the exit hook below, so it never outlives its parent).
  // moto's server serving each call whole, as AWS applies it (moto_server.py).
  // Port 0: moto binds a free port itself and names it in its startup line. A port picked here
  // and bound by moto seconds later (its imports) could be taken in between by another suite's
  // server or connection (bats files run side by side), and a readiness check could then reach
  // another suite's moto.
  const server = join(__dirname, 'moto_server.py');
  const child: ChildProcess = spawn('python3', [server, '-H', '127.0.0.1', '-p', '0'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    detached: true,
  });
  const killNow = (): void => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  process.on('exit', killNow);
  child.once('exit', () => process.off('exit', killNow));
  let stderr = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  // A safety bound: moto imports for seconds on an unloaded machine, longer on a loaded one.
  const boundMs = scaled(30_000);
  const deadline = Date.now() + boundMs;
  let port: number | undefined;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`moto exited with ${child.exitCode}: ${stderr}`);
    port ??= Number(/Running on http:\/\/127\.0\.0\.1:(\d+)/.exec(stderr)?.[1]) || undefined;
    if (port !== undefined) {
      try {
        const res = await fetch(`http://127.0.0.1:${port}/moto-api/data.json`);
        if (res.ok) break;
      } catch {
        // not answering yet
      }
    }
    if (Date.now() > deadline) {
      killNow();
      throw new Error(`moto did not answer${port === undefined ? ' (no port in its startup line)' : ` on port ${port}`} within ${boundMs / 1000} s: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const endpoint = `http://127.0.0.1:${port}`;
  return {
    endpoint,
    port,
    pid: child.pid,
    async reset() {
      const res = await fetch(`${endpoint}/moto-api/reset`, { method: 'POST' });
      if (!res.ok) throw new Error(`moto reset failed: ${res.status}`);
    },
    stop() {
      return new Promise((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 3_000).unref();
      });
    },
  };
}
