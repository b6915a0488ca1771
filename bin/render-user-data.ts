#!/usr/bin/env node
/**
 * Prints the user data an instance of a pool boots with (docs/boot-modes.md):
 *
 *   npx cdk-warm-runners-render --provider github|gitlab [--prefix P] [--runner-user U] [--runner-dir D]
 *     [--prepare CMD]... [--part user-data|hook|unit]
 *
 * (the package's executable, dist/bin/render-user-data.js; in a checkout: `npm run render -- ...`).
 *
 * Production defaults for everything not given; see lib/user-data.ts for all options.
 */
import { parseArgs } from 'node:util';
import { PROVIDERS, isProvider } from '../lambdas/shared/contract';
import { renderHookScript, renderHookUnit, renderUserData, type UserDataOptions } from '../lib/user-data';

const USAGE = `usage: cdk-warm-runners-render --provider ${PROVIDERS.join('|')} [--prefix PREFIX] [--runner-user USER]
       [--runner-dir DIR] [--prepare COMMAND]... [--part user-data|hook|unit]
(in a checkout of the repository: npm run render -- ...)`;

const PARTS = {
  'user-data': renderUserData,
  hook: renderHookScript,
  unit: renderHookUnit,
} as const;

function usage(problem: string): never {
  process.stderr.write(`render-user-data: ${problem}\n${USAGE}\n`);
  process.exit(2);
}

export function main(argv: string[]): string {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        provider: { type: 'string' },
        prefix: { type: 'string' },
        'runner-user': { type: 'string' },
        'runner-dir': { type: 'string' },
        prepare: { type: 'string', multiple: true },
        part: { type: 'string', default: 'user-data' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    });
  } catch (error) {
    usage((error as Error).message);
  }
  const { values } = parsed;
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  if (values.provider === undefined) usage('--provider is required');
  if (!isProvider(values.provider)) usage(`--provider "${values.provider}" must be one of ${PROVIDERS.join(', ')}`);
  const part = values.part ?? 'user-data';
  if (!Object.hasOwn(PARTS, part)) usage(`--part "${part}" must be one of ${Object.keys(PARTS).join(', ')}`);
  const options: UserDataOptions = {
    provider: values.provider,
    ...(values.prefix !== undefined && { prefix: values.prefix }),
    ...(values['runner-user'] !== undefined && { runnerUser: values['runner-user'] }),
    ...(values['runner-dir'] !== undefined && { runnerDir: values['runner-dir'] }),
    ...(values.prepare !== undefined && { prepareCommands: values.prepare }),
  };
  return PARTS[part as keyof typeof PARTS](options);
}

if (require.main === module) {
  try {
    process.stdout.write(main(process.argv.slice(2)));
  } catch (error) {
    // Validation errors already say what to change.
    process.stderr.write(`render-user-data: ${(error as Error).message}\n`);
    process.exit(1);
  }
}
