/**
 * The unknown-outcome fault kinds of issue 23's fault table, injected once as SDK middleware on
 * a real client (so the caller meets them where a real answer would arrive: after its pacing,
 * its timeout and its retries), plus EC2's ClientToken idempotency, which moto does not keep.
 *
 * - `500`: answered 500, not executed. `reset-before`: the connection reset before the request
 *   reached the service. `reset-after` / `503-after`: executed, then the answer is lost (a
 *   reset, a 503). `slow`: executed, answered after the caller's timeout. `late`: the caller
 *   times out first; the request reaches the service only after the caller's next call on the
 *   client (for a launch: after its look-up by the token). `throttle`: refused by throttling
 *   once, not executed.
 */
export const FAULT_KINDS = ['500', 'reset-before', 'reset-after', '503-after', 'slow', 'late', 'throttle'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

type Next = (args: { input: object }) => Promise<unknown>;
interface StackClient {
  middlewareStack: { add(middleware: (next: Next, context: { commandName?: string }) => (args: { input: object }) => Promise<unknown>, options: object): void };
}

const error = (name: string, status: number, fault: 'client' | 'server') => Object.assign(new Error(`${name} (injected)`), { name, $fault: fault, $metadata: { httpStatusCode: status } });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface InjectedFault {
  /** How many matching calls were sent (a resend counts again). */
  readonly calls: () => number;
  /** Whether the fault has been injected. */
  readonly fired: () => boolean;
}

/**
 * Injects `kind` into the first call of `command` that `when` accepts (by its input), on
 * `client`. `slowMs` must be longer than the caller's timeout.
 */
export function injectOnce(client: StackClient, command: string, kind: FaultKind, options: { slowMs: number; when?: (input: Record<string, unknown>) => boolean; times?: number }): InjectedFault {
  let calls = 0;
  let fired = 0;
  let late: (() => Promise<unknown>) | undefined;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const matches = context.commandName === command && (options.when?.(args.input as Record<string, unknown>) ?? true);
      if (matches) calls++;
      if (!matches || fired >= (options.times ?? 1)) {
        const out = await next(args);
        // A late request reaches the service after the caller's next call has been answered.
        const pending = late;
        late = undefined;
        if (pending) await pending().catch(() => undefined);
        return out;
      }
      fired++;
      switch (kind) {
        case '500':
          throw error('InternalError', 500, 'server');
        case 'reset-before':
          throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
        case 'reset-after':
          await next(args).catch(() => undefined);
          throw Object.assign(new Error('socket hang up'), { name: 'ECONNRESET' });
        case '503-after':
          await next(args).catch(() => undefined);
          throw error('ServiceUnavailable', 503, 'server');
        case 'slow': {
          const out = await next(args);
          await sleep(options.slowMs);
          return out;
        }
        case 'late':
          late = () => next(args);
          throw Object.assign(new Error('timed out'), { name: 'TimeoutError' });
        case 'throttle':
          throw error('ThrottlingException', 400, 'client');
      }
    },
    { step: 'initialize', priority: 'high', name: `fault-${command}-${kind}-${Math.random()}` },
  );
  return { calls: () => calls, fired: () => fired > 0 };
}

/**
 * EC2's idempotency for launches with a ClientToken (RunInstances, CreateFleet), which moto
 * ignores: a second request with a token EC2 has launched for returns the first result and
 * launches nothing (EC2 API reference, "Ensuring idempotency in Amazon EC2 API requests").
 * Installed below the faults, so a late request is deduplicated as EC2 would.
 */
export function keepClientTokens(ec2: StackClient): void {
  const launched = new Map<string, unknown>();
  ec2.middlewareStack.add(
    (next, context) => async (args) => {
      const token = (args.input as { ClientToken?: string }).ClientToken;
      if (!token || !['RunInstancesCommand', 'CreateFleetCommand'].includes(context.commandName ?? '')) return next(args);
      if (launched.has(token)) return launched.get(token);
      const out = await next(args);
      launched.set(token, out);
      return out;
    },
    { step: 'initialize', priority: 'low', name: 'ec2-client-token' },
  );
}
