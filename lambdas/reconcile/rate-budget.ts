import type { HeaderLookup } from '../ci/rate-limit';

/**
 * What the reconciler may still spend of a CI credential's rate limit, from the
 * `x-ratelimit-limit` and `x-ratelimit-remaining` headers of the answers it got (GitHub:
 * https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api; GitLab
 * sends `ratelimit-*`). The installation's limit is shared with scale-up's registrations and
 * the sweep: the reconciler stops while a reserve is left for them.
 */
export class RateBudget {
  private readonly seen = new Map<string, RateFigures>();

  /** `reserveFraction` of the limit is left untouched (at least `minReserve` requests). */
  constructor(
    private readonly reserveFraction: number,
    private readonly minReserve: number,
  ) {}

  observe(credential: string, header: HeaderLookup): void {
    const limit = Number(header('x-ratelimit-limit') ?? header('ratelimit-limit'));
    const remaining = Number(header('x-ratelimit-remaining') ?? header('ratelimit-remaining'));
    const reset = header('x-ratelimit-reset') ?? header('ratelimit-reset');
    // Both services send the reset as Unix seconds.
    const resetAtMs = reset !== undefined && /^\d+$/.test(reset) ? Number(reset) * 1000 : undefined;
    if (Number.isFinite(limit) && Number.isFinite(remaining) && limit > 0) this.seen.set(credential, { limit, remaining, ...(resetAtMs === undefined ? {} : { resetAtMs }) });
  }

  /** The latest figures of `credential`, undefined before any answer. */
  figures(credential: string): RateFigures | undefined {
    return this.seen.get(credential);
  }

  /** Whether one more request on `credential` leaves the reserve; true before any answer was seen. */
  allows(credential: string): boolean {
    const s = this.seen.get(credential);
    if (!s) return true;
    return s.remaining - 1 >= this.reserveOf(s.limit);
  }

  reserveOf(limit: number): number {
    return Math.max(this.minReserve, Math.ceil(limit * this.reserveFraction));
  }

  /** The last `remaining` seen per credential (published as a metric). */
  remaining(): Map<string, number> {
    return new Map([...this.seen].map(([k, v]) => [k, v.remaining]));
  }
}

/** A credential's rate limit as its latest answer told it. */
export interface RateFigures {
  readonly limit: number;
  readonly remaining: number;
  /** When the limit is whole again (epoch ms), when the answer said. */
  readonly resetAtMs?: number;
}

/** Thrown to end a run early, before the reserve of `credential` would be spent. */
export class RateReserveReached extends Error {
  constructor(readonly credential: string) {
    super(`the ${credential} rate limit reached the reconciler's reserve`);
    this.name = 'RateReserveReached';
  }
}
