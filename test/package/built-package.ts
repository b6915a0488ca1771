import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The repository root: the package these tests pack. */
export const ROOT = join(__dirname, '..', '..');

export interface PackageJson {
  readonly name: string;
  readonly version: string;
  readonly scripts?: Record<string, string>;
  readonly files?: string[];
}

export function packageJson(dir = ROOT): PackageJson {
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as PackageJson;
}

/**
 * The package tests read what `npm run build` made (npm ci's prepare and npm test's jsii step
 * run it): the assembly and the Lambda bundles. Without them a test would pack an incomplete
 * package and fail for the wrong reason, so say what to run instead.
 */
export function assertBuilt(): void {
  const missing = ['.jsii', 'dist/lib/index.js', 'dist/lib/index.d.ts', 'assets/webhook/index.js'].filter((f) => !existsSync(join(ROOT, f)));
  if (missing.length > 0) throw new Error(`the package is not built (${missing.join(', ')} missing): run "npm run build" first`);
}

/**
 * The environment for an npm or node process that acts as a consumer, not as this package:
 * without the `npm_*` variables that `npm test` exports (npm reads `npm_config_*` back as its
 * own configuration, and the package's would then leak into the consumer's install).
 */
export function consumerEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!/^npm_/i.test(key)) env[key] = value;
  return { ...env, ...extra };
}

export interface Run {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs a command to its end; throws with its output when it fails, so the test names the cause. */
export function run(cmd: string, args: string[], options: SpawnSyncOptions & { allowFailure?: boolean } = {}): Run {
  const result = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, ...options });
  const out: Run = { status: result.status, stdout: String(result.stdout ?? ''), stderr: String(result.stderr ?? '') };
  if (result.error) throw result.error;
  if (out.status !== 0 && !options.allowFailure) {
    throw new Error(`${cmd} ${args.join(' ')} exited ${out.status}\n${out.stdout.slice(-4000)}\n${out.stderr.slice(-4000)}`);
  }
  return out;
}
