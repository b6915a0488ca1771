import { createServer, type IncomingMessage, type Server } from 'node:http';

/** One request as a loopback server saw it. */
export interface SeenRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingMessage['headers'];
  readonly body: string;
}

export interface Answer {
  readonly status: number;
  readonly headers?: Record<string, string>;
  readonly body?: unknown;
}

/** `'hang'` accepts the request and never answers, to prove a client's time bound. */
export type Route = (req: SeenRequest) => Answer | 'hang' | Promise<Answer | 'hang'>;

export interface Loopback {
  readonly url: string;
  readonly requests: SeenRequest[];
  close(): Promise<void>;
}

/** An HTTP server on a free 127.0.0.1 port, speaking whatever `route` answers. */
export async function startLoopback(route: Route): Promise<Loopback> {
  const requests: SeenRequest[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const seen: SeenRequest = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      requests.push(seen);
      void Promise.resolve(route(seen)).then(
        (answer) => {
          if (answer === 'hang') return;
          const text = answer.body === undefined ? '' : typeof answer.body === 'string' ? answer.body : JSON.stringify(answer.body);
          res.writeHead(answer.status, { 'content-type': 'application/json', ...answer.headers });
          res.end(text);
        },
        (e: unknown) => {
          res.writeHead(500);
          res.end(String(e));
        },
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (typeof address !== 'object' || !address) throw new Error('no address');
  return {
    url: `http://127.0.0.1:${address.port}`,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
