import { errorDetail, ScaleSetApiError } from './errors';

/** The Actions service's URL and the admin token for it, from the registration exchange. */
export interface AdminConnection {
  /** The service's base URL (ends with "/"). */
  readonly url: string;
  /** A bearer JWT; a secret. */
  readonly token: string;
  /** Epoch ms, from the token's `exp` claim. */
  readonly expiresAt: number;
}

export interface AdminTokenOptions {
  /** The REST API URL (`POST {apiUrl}/actions/runner-registration`). */
  readonly apiUrl: string;
  /** The organisation's or repository's web URL (config-url.ts). */
  readonly configUrl: string;
  /** A fresh registration token of the scope (REST, with the App's installation token). */
  readonly registrationToken: () => Promise<string>;
  readonly fetch: typeof fetch;
  readonly timeoutMs: number;
  readonly now: () => number;
  /** A token with less than this left is exchanged again (the client's `updateTokenIfNeeded` uses a minute). */
  readonly marginMs?: number;
}

/**
 * The admin token, exchanged once and kept until shortly before it expires (client.go
 * `updateTokenIfNeeded`, `getRunnerRegistrationToken`, `getActionsServiceAdminConnection`):
 * a registration token minted with the App's installation token, then
 * `POST {api}/actions/runner-registration` with `Authorization: RemoteAuth <registration
 * token>` and `{"url": <config URL>, "runner_event": "register"}`, answered
 * `{"url": <Actions service>, "token": <JWT>}`. Concurrent callers share one exchange.
 */
export class AdminTokens {
  private current: AdminConnection | undefined;
  private pending: Promise<AdminConnection> | undefined;

  constructor(private readonly options: AdminTokenOptions) {}

  get(): Promise<AdminConnection> {
    const margin = this.options.marginMs ?? 60_000;
    if (this.current && this.current.expiresAt - margin > this.options.now()) return Promise.resolve(this.current);
    this.pending ??= this.exchange().finally(() => (this.pending = undefined));
    return this.pending;
  }

  /** The service refused `token` (401): the next `get` exchanges again. */
  invalidate(token: string): void {
    if (this.current?.token === token) this.current = undefined;
  }

  private async exchange(): Promise<AdminConnection> {
    const registration = await this.options.registrationToken();
    const url = `${this.options.apiUrl.replace(/\/+$/, '')}/actions/runner-registration`;
    let res: Response;
    try {
      res = await this.options.fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `RemoteAuth ${registration}`, 'user-agent': 'cdk-warm-runners' },
        body: JSON.stringify({ url: this.options.configUrl, runner_event: 'register' }),
        signal: AbortSignal.timeout(this.options.timeoutMs),
      });
    } catch (e) {
      throw new ScaleSetApiError('runner-registration', 0, (e as Error).message);
    }
    const text = await res.text();
    if (res.status < 200 || res.status > 299) throw new ScaleSetApiError('runner-registration', res.status, errorDetail(text));
    let doc: { url?: unknown; token?: unknown };
    try {
      doc = JSON.parse(text.replace(/^\uFEFF/, '')) as typeof doc;
    } catch {
      throw new ScaleSetApiError('runner-registration', res.status, 'the answer is not JSON');
    }
    if (typeof doc.url !== 'string' || typeof doc.token !== 'string' || doc.token === '') throw new ScaleSetApiError('runner-registration', res.status, 'the answer lacks url or token');
    const expiresAt = jwtExpiry(doc.token);
    if (expiresAt === undefined) throw new ScaleSetApiError('runner-registration', res.status, 'the admin token is not a JWT with an exp claim');
    this.current = { url: doc.url.endsWith('/') ? doc.url : `${doc.url}/`, token: doc.token, expiresAt };
    return this.current;
  }
}

/** A JWT's `exp` in epoch ms, read without verifying (the client does the same: `actionsServiceAdminTokenExpiresAt`). */
export function jwtExpiry(token: string): number | undefined {
  const payload = token.split('.')[1];
  if (payload === undefined) return undefined;
  try {
    const exp = (JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { exp?: unknown }).exp;
    return typeof exp === 'number' && Number.isFinite(exp) ? exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}
