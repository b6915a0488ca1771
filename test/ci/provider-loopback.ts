import { afterAll, beforeAll, beforeEach, expect } from 'vitest';
import { captureConsole } from '../support/console-capture';
import type { FleetConfig } from '../../lambdas/shared/contract';
import { startLoopback, type Answer, type Loopback, type SeenRequest } from '../support/loopback';
import { scaled } from '../support/slowdown';

/**
 * The setup the GitHub and GitLab provider tests share: one loopback server per test file
 * speaking the service's routes behind the faults a test injects, the console captured (the
 * secret-leak tests read it), and the provider's backoff waits recorded instead of slept.
 */
export type Fault = (req: SeenRequest) => Answer | 'hang' | undefined;

export interface ProviderLoopback {
  /** Set before the file's tests. */
  readonly server: Loopback;
  /** Answers a test wants before the documented happy path; each is consumed by the first request it answers. */
  readonly faults: Fault[];
  /** The waits the provider asked for (`sleep`), this test's. */
  readonly waits: number[];
  /** Every error `failure` saw in the file, as text and JSON (the secret-leak tests read them). */
  readonly errors: string[];
  /** The console lines of the whole file. */
  readonly consoleLines: string[];
  /** The provider's `sleep`: records the wait and returns at once. */
  sleep(ms: number): Promise<void>;
  /** The options every provider under test takes alike: the config's prefix and pools, `sleep`, a scaled time bound. */
  providerBase(config: FleetConfig): { prefix: string; pools: FleetConfig['pools']; sleep: (ms: number) => Promise<void>; timeoutMs: number };
  /** The rejection of `p`, which must be an `E`; kept in `errors`. */
  failure<E>(p: Promise<unknown>, type: abstract new (...args: never[]) => E): Promise<E>;
}

/** Registers the file's server start and stop and the per-test reset (`reset`: the test file's own state). */
export function providerLoopback(route: (req: SeenRequest) => Answer | 'hang', reset: () => void = () => {}): ProviderLoopback {
  const faults: Fault[] = [];
  const waits: number[] = [];
  const errors: string[] = [];
  const state = { server: undefined as Loopback | undefined, consoleLines: [] as string[] };
  beforeAll(async () => {
    state.consoleLines = captureConsole();
    state.server = await startLoopback((req) => takeFault(faults, req) ?? route(req));
  });
  afterAll(async () => state.server?.close());
  beforeEach(() => {
    faults.length = 0;
    waits.length = 0;
    state.server!.requests.length = 0;
    reset();
  });
  return {
    get server() {
      return state.server!;
    },
    faults,
    waits,
    errors,
    get consoleLines() {
      return state.consoleLines;
    },
    sleep: async (ms) => void waits.push(ms),
    providerBase(config) {
      return { prefix: config.prefix, pools: config.pools, sleep: this.sleep, timeoutMs: scaled(2_000) };
    },
    async failure<E>(p: Promise<unknown>, type: abstract new (...args: never[]) => E): Promise<E> {
      const e = await p.then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(e).toBeInstanceOf(type);
      errors.push(String(e), JSON.stringify(e));
      return e as E;
    },
  };
}

function takeFault(faults: Fault[], req: SeenRequest): Answer | 'hang' | undefined {
  for (let i = 0; i < faults.length; i++) {
    const answer = faults[i]!(req);
    if (answer !== undefined) {
      faults.splice(i, 1);
      return answer;
    }
  }
  return undefined;
}
