import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';

/**
 * The HTTP plumbing both loopback CI servers share: a JSON server on a free 127.0.0.1 port,
 * a synchronous route function over a fully read request, and one-shot fault answers.
 */
export interface HttpRequest {
  readonly method: string;
  /** The path without the query string. */
  readonly path: string;
  readonly query: URLSearchParams;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
  /** Aborted when the client closes the connection before the answer is written (an abandoned long poll). */
  readonly closed?: AbortSignal;
}

export interface HttpAnswer {
  readonly status: number;
  /** JSON-encoded unless a string; none for 204. */
  readonly body?: unknown;
  readonly headers?: Record<string, string>;
}

export interface FaultMatch {
  readonly method: string;
  /** Tested against the request path without the query string. */
  readonly path: RegExp;
}

/**
 * Answers injected before a server's own routing (and before its authentication, as a load
 * balancer's 5xx would be): each matching request takes one, `times` in all.
 */
export class Faults {
  private readonly pending: { match: FaultMatch; status: number; left: number }[] = [];

  add(match: FaultMatch, status: number, times = 1): void {
    if (!Number.isInteger(status) || status < 100 || status > 599) throw new Error(`fault status ${status} is not an HTTP status`);
    if (!Number.isInteger(times) || times < 1) throw new Error(`fault times ${times} must be a positive integer`);
    this.pending.push({ match, status, left: times });
  }

  /** The status of the first fault matching the request, consumed; undefined when none does. */
  take(method: string, path: string): number | undefined {
    const i = this.pending.findIndex((f) => f.match.method.toUpperCase() === method.toUpperCase() && testRegExp(f.match.path, path));
    const fault = this.pending[i];
    if (!fault) return undefined;
    if (--fault.left === 0) this.pending.splice(i, 1);
    return fault.status;
  }
}

/** An injected 429 names its wait (`retry-after`, seconds), as both services' rate limits do. */
export function rateLimitHeaders(status: number): Record<string, string> {
  return status === 429 ? { 'retry-after': '1' } : {};
}

/** A global or sticky RegExp keeps `lastIndex` between tests; a fault must match the same way each time. */
function testRegExp(re: RegExp, text: string): boolean {
  re.lastIndex = 0;
  return re.test(text);
}

export interface JsonServer {
  readonly url: string;
  close(): Promise<void>;
}

/** Bodies beyond this are refused (413) rather than buffered. */
const MAX_BODY_BYTES = 1 << 20;

/**
 * Serves `route` on a free 127.0.0.1 port. Routes are synchronous so that each request's
 * state change happens whole, in arrival order, as one transaction would on the real service;
 * a route may answer with a promise for a call the service answers only after a call of its
 * own (GitLab's hook event resend), its state change made before it awaits.
 */
export async function startJsonServer(route: (req: HttpRequest) => HttpAnswer | Promise<HttpAnswer>): Promise<JsonServer> {
  const server: Server = createServer((req, res) => {
    const closed = new AbortController();
    res.on('close', () => {
      if (!res.writableEnded) closed.abort();
    });
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= MAX_BODY_BYTES) chunks.push(c);
    });
    req.on('end', async () => {
      let answer: HttpAnswer;
      if (size > MAX_BODY_BYTES) {
        answer = { status: 413, body: { message: 'Request body too large' } };
      } else {
        const url = new URL(req.url ?? '/', 'http://127.0.0.1');
        try {
          answer = await route({ method: req.method ?? 'GET', path: url.pathname, query: url.searchParams, headers: req.headers, body: Buffer.concat(chunks).toString('utf8'), closed: closed.signal });
        } catch (e) {
          answer = { status: 500, body: { message: `loopback server error: ${(e as Error).message}` } };
        }
      }
      const text = answer.body === undefined || answer.status === 204 ? '' : typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body);
      res.writeHead(answer.status, { ...(text === '' ? {} : { 'content-type': 'application/json; charset=utf-8' }), ...answer.headers });
      res.end(text);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const address = server.address();
  if (typeof address !== 'object' || !address) throw new Error('loopback server has no address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A JSON object body, or undefined when the body is not one. */
export function jsonObject(body: string): Record<string, unknown> | undefined {
  try {
    const parsed: unknown = JSON.parse(body);
    return typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** A random token with the service's prefix, e.g. `ghs_…` or `glrt-…`. */
export function randomToken(prefix: string, bytes = 24): string {
  return prefix + randomBytes(bytes).toString('base64url');
}

/**
 * An RFC 8288 `link` header for a paged list, as each service writes it: GitHub names only the
 * pages there are to go to (`prev`, `next`, `last`, `first`: no `first`/`prev` on the first page,
 * no `next`/`last` on the last); GitLab always names `first` and `last`.
 */
export function linkHeader(style: 'github' | 'gitlab', base: string, path: string, query: URLSearchParams, page: number, lastPage: number): string {
  const at = (p: number, rel: string) => {
    const q = new URLSearchParams(query);
    q.set('page', String(p));
    return `<${base}${path}?${q.toString()}>; rel="${rel}"`;
  };
  const links: string[] = [];
  if (page > 1) links.push(at(page - 1, 'prev'));
  if (page < lastPage) links.push(at(page + 1, 'next'));
  if (style === 'gitlab') {
    links.push(at(1, 'first'), at(lastPage, 'last'));
  } else {
    if (page < lastPage) links.push(at(lastPage, 'last'));
    if (page > 1) links.push(at(1, 'first'));
  }
  return links.join(', ');
}

/** The bearer or `token` credential of an `authorization` header. */
export function authorizationCredential(headers: IncomingHttpHeaders): string | undefined {
  const m = /^(?:bearer|token)\s+(\S+)$/i.exec(headers.authorization ?? '');
  return m?.[1];
}
