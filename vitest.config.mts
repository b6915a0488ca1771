import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

// The machine's slowdown at the start (test/support/slowdown.ts, run as its own process: it
// is CommonJS TypeScript) for the safety bounds below, unless CWR_SLOWDOWN forces a figure.
// The workers get it as CWR_SLOWDOWN_SEEN, the floor of the figure each test file measures
// again when it scales a bound (load rises while the suite runs).
const forced = process.env.CWR_SLOWDOWN;
if (forced !== undefined && forced !== '' && !(Number(forced) >= 1)) throw new Error(`CWR_SLOWDOWN must be a number of at least 1 (got "${forced}"); unset it to have it measured`);
// Vitest loads this file again for each project below: measured and printed once per run.
const atStart = globalThis as { cwrSlowdownAtStart?: number };
const first = atStart.cwrSlowdownAtStart === undefined;
const measure = () => Number(execFileSync(process.execPath, ['--import', 'tsx', 'test/support/slowdown.ts'], { cwd: import.meta.dirname, encoding: 'utf8' }).trim());
const slowdown = (atStart.cwrSlowdownAtStart ??= forced ? Number(forced) : measure());
if (first) {
  if (!forced) process.env.CWR_SLOWDOWN_SEEN = String(slowdown);
  console.log(`machine slowdown x${slowdown}${forced ? ' (CWR_SLOWDOWN)' : ' at the start, measured again by each test file that scales a bound'}: the tests' time bounds scale with it`);
}

const ROOTS = ['test', 'lambdas', 'lib', 'local'];
const testFiles = ROOTS.flatMap((dir) =>
  readdirSync(join(import.meta.dirname, dir), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => `${dir}/${f.split('\\').join('/')}`),
).sort();

// The files that share this host: the sandbox runs, moto, the integration tests, and any
// file that starts moto, a loopback server, a long-lived child process or a user. They run
// one at a time, after the others. Observed, cause not found: the default sandbox run
// (e2e-steady) stalled to its deadline in two CI runs while other files ran beside it, and
// passes alone and with files run one at a time; the sandbox tests create, reap and kill
// real users and processes. Run one at a time, vitest took 1,146 s in a fresh-clone run,
// less than the 1,549 s of the all-parallel run before. The package tests pack in the
// repository's root (`npm pack` rewrites its package.json while it runs). A file that starts
// such a thing itself lands here by its text; one that reaches it through a helper file must be
// named by path here (the loopback CI tests bind port 0 and clean up: they may run beside others).
const SHARED_HOST_PATH = /^test\/local\/e2e-|moto\.test\.ts$|^test\/integration\/|^test\/package\//;
const SHARED_HOST_TEXT = /startMoto|motoForFile|startLoopback|startReleaseServer|createServer|\.listen\(|\bspawn(Sync)?\b|useradd|boot-sandbox/;
const sharesHost = (file: string): boolean => SHARED_HOST_PATH.test(file) || SHARED_HOST_TEXT.test(readFileSync(join(import.meta.dirname, file), 'utf8'));
const serialFiles = testFiles.filter(sharesHost);
const parallelFiles = testFiles.filter((f) => !sharesHost(f));

export default defineConfig({
  test: {
    // Safety bounds, scaled by the slowdown at the start; each test file sets them again from
    // its own measurement (test/support/scaled-timeouts.ts), never below these.
    testTimeout: Math.ceil(30_000 * slowdown),
    hookTimeout: Math.ceil(60_000 * slowdown),
    setupFiles: ['test/support/scaled-timeouts.ts'],
    projects: [
      // In-process files (aws-sdk-client-mock, synth, pure functions): side by side, one per
      // core (vitest's default leaves one core idle), first.
      {
        extends: true,
        test: { name: 'parallel', include: parallelFiles, maxWorkers: Math.max(2, availableParallelism()), sequence: { groupOrder: 0 } },
      },
      // Then the files that share this host, one at a time (above), never beside the others.
      { extends: true, test: { name: 'serial', include: serialFiles, fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
  },
});
