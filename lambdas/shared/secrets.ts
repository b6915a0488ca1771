import { GetParameterCommand, ParameterNotFound, type SSMClient } from '@aws-sdk/client-ssm';

export interface SecretCacheOptions {
  /** How long a value is trusted before it is read again, so a rotated secret reaches warm containers. */
  readonly ttlMs?: number;
  /** At most this many parameters are kept; the least recently read goes first. */
  readonly maxEntries?: number;
  /** Bound on one GetParameter call. */
  readonly timeoutMs?: number;
  readonly now?: () => number;
}

export interface SecretCache {
  /**
   * The parameter's decrypted value; throws when it is missing or empty. `signal` (a caller's
   * deadline) also aborts a read this call starts.
   */
  get(name: string, signal?: AbortSignal): Promise<string>;
  /** The value, or undefined when the parameter does not exist (an optional secret). */
  find(name: string, signal?: AbortSignal): Promise<string | undefined>;
  /**
   * Forgets the cached value, so the next read goes to SSM. Callers invalidate when the
   * service refuses the credential (401): it was probably rotated, and waiting for the TTL
   * would fail every call of a warm container until then.
   */
  invalidate(name: string): void;
  /** Number of cached parameters (tests check the bound). */
  readonly size: number;
}

/** The parameter exists and holds nothing: as unusable as a missing one, but not an outage. */
export class EmptyParameterError extends Error {
  constructor(readonly parameter: string) {
    super(`SSM parameter ${parameter} is empty`);
    this.name = 'EmptyParameterError';
  }
}

interface Entry {
  readonly at: number;
  readonly value: Promise<string | undefined>;
}

/**
 * SecureString parameters read once per container and kept for a bounded time in a
 * bounded map. Concurrent readers of one name share one call. Errors name the parameter,
 * never its value; values are never logged here or by callers.
 */
export function createSecretCache(ssm: SSMClient, options: SecretCacheOptions = {}): SecretCache {
  const ttlMs = options.ttlMs ?? 5 * 60_000;
  const maxEntries = options.maxEntries ?? 16;
  const timeoutMs = options.timeoutMs ?? 3_000;
  const now = options.now ?? Date.now;
  const entries = new Map<string, Entry>();

  const read = async (name: string, signal?: AbortSignal): Promise<string | undefined> => {
    try {
      const timeout = AbortSignal.timeout(timeoutMs);
      const out = await ssm.send(new GetParameterCommand({ Name: name, WithDecryption: true }), {
        abortSignal: signal ? AbortSignal.any([timeout, signal]) : timeout,
      });
      const value = out.Parameter?.Value;
      if (value === undefined || value === '') throw new EmptyParameterError(name);
      return value;
    } catch (e) {
      if (e instanceof ParameterNotFound || (e as Error).name === 'ParameterNotFound') return undefined;
      throw e;
    }
  };

  const find = (name: string, signal?: AbortSignal): Promise<string | undefined> => {
    const hit = entries.get(name);
    if (hit && now() - hit.at < ttlMs) {
      // Re-insert so the map's order is least recently read first.
      entries.delete(name);
      entries.set(name, hit);
      return hit.value;
    }
    const value = read(name, signal);
    entries.delete(name);
    entries.set(name, { at: now(), value });
    // A failed read is not cached: the next request tries again.
    value.catch(() => {
      if (entries.get(name)?.value === value) entries.delete(name);
    });
    while (entries.size > maxEntries) entries.delete(entries.keys().next().value as string);
    return value;
  };

  return {
    find,
    invalidate(name) {
      entries.delete(name);
    },
    async get(name, signal) {
      const value = await find(name, signal);
      if (value === undefined) throw new Error(`SSM parameter ${name} does not exist; put the secret there (see docs/github.md or docs/gitlab.md)`);
      return value;
    },
    get size() {
      return entries.size;
    },
  };
}
