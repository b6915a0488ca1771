import { execFileSync } from 'node:child_process';
import { defineConfig } from 'vitest/config';

// The machine's slowdown, measured once here (test/support/slowdown.ts, run as its own
// process: it is CommonJS TypeScript) unless given; the workers inherit CWR_SLOWDOWN, so
// every suite's own scaled bounds use the same figure.
process.env.CWR_SLOWDOWN ||= execFileSync(process.execPath, ['--import', 'tsx', 'test/support/slowdown.ts'], { cwd: import.meta.dirname, encoding: 'utf8' }).trim();
const slowdown = Number(process.env.CWR_SLOWDOWN);
if (!Number.isFinite(slowdown) || slowdown < 1) throw new Error(`CWR_SLOWDOWN must be a number of at least 1 (got "${process.env.CWR_SLOWDOWN}"); unset it to have it measured`);
console.log(`machine slowdown x${slowdown}: the tests' time bounds scale with it`);

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'lambdas/**/*.test.ts', 'lib/**/*.test.ts', 'local/**/*.test.ts'],
    // Safety bounds, scaled by the slowdown.
    testTimeout: Math.ceil(30_000 * slowdown),
    hookTimeout: Math.ceil(60_000 * slowdown),
  },
});
