import type { RunnerPoolProps } from './props';

/**
 * The pool's prepare commands: `prepareCommands`, or the deprecated `warm.prepareCommands`
 * (the same commands, which now run on cold launches too). Both set is refused: which list
 * wins would be a guess.
 */
export function poolPrepareCommands(pool: RunnerPoolProps, where: (field: string) => string = (field) => `${field} (pool "${pool.name}")`): string[] {
  const legacy = pool.warm?.prepareCommands;
  if (pool.prepareCommands !== undefined && legacy !== undefined) {
    throw new Error(
      `${where('prepareCommands')} and warm.prepareCommands are both set; warm.prepareCommands is the deprecated name of prepareCommands: keep one list, in prepareCommands`,
    );
  }
  return [...(pool.prepareCommands ?? legacy ?? [])];
}
