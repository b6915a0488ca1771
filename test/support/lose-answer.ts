import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';

export interface LoseAnswerOptions {
  /** True (default): the call runs and the caller hears a reset; false: it never runs and the caller hears a timeout. */
  readonly lands?: boolean;
  /** Runs before the lost call (for example another writer changing the item first). */
  readonly before?: () => Promise<void>;
  /** Which calls of the command count (by their input); default every one. */
  readonly when?: (input: Record<string, unknown>) => boolean;
}

/**
 * Loses the answer to the first matching call of `command` on `client`, as a reset, a 503
 * after the fact or a reply past the SDK's timeout does. Returns the client, with `calls()`
 * counting the matching calls sent (a call resent after a lost answer counts twice).
 */
export function losingFirstAnswer(client: DynamoDBClient, command: string, options: LoseAnswerOptions = {}): DynamoDBClient & { calls: () => number } {
  let calls = 0;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== command || !(options.when?.(args.input as Record<string, unknown>) ?? true)) return next(args);
      if (calls++ > 0) return next(args);
      if (options.lands === false) throw Object.assign(new Error('timed out'), { name: 'TimeoutError' });
      await options.before?.();
      // Whatever the call answered (done, or refused by the condition), the caller hears a reset.
      await next(args).catch(() => undefined);
      throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
    },
    { step: 'initialize' },
  );
  return Object.assign(client, { calls: () => calls });
}
