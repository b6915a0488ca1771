/**
 * A loopback release server for the install step's tests and the boot benchmark: serves the
 * files of one directory (the runner packages a test built, with their real checksums) the
 * way a release download site does, and plays the download faults the install step must
 * refuse. Run with `node --import tsx test/templates/release-server.ts DIR`; it prints one JSON
 * line `{"url":"http://127.0.0.1:<port>"}`, then serves until SIGTERM or its parent's exit.
 *
 * DIR/.mode, read on every request, chooses the answer: empty or missing, the file; "404",
 * Not Found; "tamper", the file with its last byte changed (same length, another digest);
 * "truncate", the file's full Content-Length but only its first half, then the connection
 * closed. Every request's path is appended to DIR/.requests.
 */
import { appendFileSync, existsSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { basename, join } from 'node:path';
import { listenOnLoopback } from '../../local/instances/imds';

const dir = process.argv[2] ?? '';
if (!dir || !existsSync(dir)) {
  console.error('usage: release-server.ts DIR');
  process.exit(2);
}

const server = createServer((req, res) => {
  const name = basename(decodeURIComponent(new URL(req.url ?? '/', 'http://127.0.0.1').pathname));
  appendFileSync(join(dir, '.requests'), `${req.url}\n`);
  const mode = existsSync(join(dir, '.mode')) ? readFileSync(join(dir, '.mode'), 'utf8').trim() : '';
  const file = join(dir, name);
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

void listenOnLoopback(server).then((url) => {
  process.stdout.write(`${JSON.stringify({ url })}\n`);
  const stop = (): void => {
    server.close();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) stop();
  }, 1000).unref();
});
