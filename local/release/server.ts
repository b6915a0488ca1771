/**
 * A loopback release server: serves the files of one directory (runner packages built with
 * their real checksums) the way a release download site does, and plays the download faults
 * the install step must refuse. `npm run local` runs it in its own process (startReleaseServer);
 * the bats harness and the boot benchmark run it as a command:
 *
 *   node --import tsx local/release/server.ts DIR
 *
 * which prints one JSON line `{"url":"http://127.0.0.1:<port>"}`, then serves until SIGTERM or
 * its parent's exit; there DIR/.mode, read on every request, chooses the answer and every
 * request's path is appended to DIR/.requests.
 *
 * Modes: "" the file; "404" Not Found; "tamper" the file with its last byte changed (same
 * length, another digest); "truncate" the file's full Content-Length but only its first half,
 * then the connection closed.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { basename, join } from 'node:path';
import { listenOnLoopback } from '../instances/imds';
import type { LocalReleases } from './published';
import { untilStopped } from '../until-stopped';

export const RELEASE_MODES = ['', '404', 'tamper', 'truncate'] as const;
export type ReleaseMode = (typeof RELEASE_MODES)[number];

export interface ReleaseServerOptions {
  /** The directory whose files are served (names starting with "." never are). */
  readonly dir: string;
  /** How to answer, asked on every request. @default always '' (the file) */
  readonly mode?: () => ReleaseMode;
  /** Called with every request's path. */
  readonly onRequest?: (path: string) => void;
  /** Release data and versioned files (local/release/published.ts), answered before the directory's files. */
  readonly releases?: LocalReleases;
}

export interface ReleaseServer {
  readonly url: string;
  close(): Promise<void>;
}

export function createReleaseServer(o: ReleaseServerOptions): Server {
  return createServer((req, res) => {
    const { pathname, searchParams } = new URL(req.url ?? '/', 'http://127.0.0.1');
    const name = basename(decodeURIComponent(pathname));
    o.onRequest?.(req.url ?? '/');
    const mode = o.mode?.() ?? '';
    const released = o.releases?.answer(pathname, `http://${req.headers.host ?? '127.0.0.1'}`, searchParams);
    if (released && mode === '') {
      res.writeHead(released.status, { 'content-type': released.type, 'content-length': released.body.length }).end(released.body);
      return;
    }
    const file = join(o.dir, name);
    if (mode === '404' || name.startsWith('.') || !existsSync(file)) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('Not Found');
      return;
    }
    const body = readFileSync(file);
    const headers = { 'content-type': 'application/octet-stream', 'content-length': body.length };
    if (mode === 'tamper') body.writeUInt8(body.readUInt8(body.length - 1) ^ 0xff, body.length - 1);
    if (mode === 'truncate') {
      res.writeHead(200, headers);
      res.write(body.subarray(0, body.length >> 1), () => res.destroy());
      return;
    }
    res.writeHead(200, headers).end(body);
  });
}

/** The server on a free 127.0.0.1 port, in this process. */
export async function startReleaseServer(o: ReleaseServerOptions): Promise<ReleaseServer> {
  const server = createReleaseServer(o);
  const url = await listenOnLoopback(server);
  return {
    url,
    close: () => {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** DIR/.mode, as the bats harness writes it (release_mode); missing or unknown serves the file. */
function modeFile(dir: string): ReleaseMode {
  const path = join(dir, '.mode');
  const text = existsSync(path) ? readFileSync(path, 'utf8').trim() : '';
  return (RELEASE_MODES as readonly string[]).includes(text) ? (text as ReleaseMode) : '';
}

if (require.main === module) {
  const dir = process.argv[2] ?? '';
  if (!dir || !existsSync(dir)) {
    console.error('usage: local/release/server.ts DIR');
    process.exit(2);
  }
  void startReleaseServer({ dir, mode: () => modeFile(dir), onRequest: (path) => appendFileSync(join(dir, '.requests'), `${path}\n`) }).then((server) => {
    process.stdout.write(`${JSON.stringify({ url: server.url })}\n`);
    untilStopped(() => server.close());
  });
}
