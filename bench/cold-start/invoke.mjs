// One cold start of a bundled function (started by bench/cold-start/run.ts in a fresh node
// process, under the CPU share of the function's memory size): loads the bundle as Lambda's
// Node.js runtime would (require of assets/<name>/index.js: the module's own
// initialisation, its clients and caches), then invokes its handler with each event in turn,
// and writes the times (ms) as JSON to the result file (stdout is the function's log).
// Plain JavaScript, so no loader of ours runs in the process being timed.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const [bundle, eventsFile, resultFile] = process.argv.slice(2);
if (!bundle || !eventsFile || !resultFile) throw new Error('usage: node invoke.mjs <bundle.js> <events.json> <result.json>');
const events = JSON.parse(readFileSync(eventsFile, 'utf8'));
// performance.now() counts from the process's start: what node itself took before our first line.
const nodeStartMs = performance.now();
const load = createRequire(import.meta.url);
const cpu0 = process.cpuUsage();
const t0 = performance.now();
const { handler } = load(bundle);
const initMs = performance.now() - t0;
const initCpu = process.cpuUsage(cpu0);
const initCpuMs = (initCpu.user + initCpu.system) / 1000;
const invocations = [];
for (const event of events) {
  const cpu = process.cpuUsage();
  const start = performance.now();
  const result = await handler(event);
  const used = process.cpuUsage(cpu);
  invocations.push({ ms: performance.now() - start, cpuMs: (used.user + used.system) / 1000, result: summary(result) });
}
// Resident memory after both invocations, against the memory size (Lambda counts the runtime's too).
const rssMb = process.memoryUsage().rss / 2 ** 20;
writeFileSync(resultFile, JSON.stringify({ nodeStartMs, initMs, initCpuMs, invocations, rssMb }));

/** Enough of the answer to see the invocation did its work (never a secret: status and counts). */
function summary(result) {
  if (result === undefined || result === null) return null;
  if (typeof result.statusCode === 'number') return { statusCode: result.statusCode };
  if (Array.isArray(result.batchItemFailures)) return { batchItemFailures: result.batchItemFailures.length };
  return JSON.parse(JSON.stringify(result, (_k, v) => (typeof v === 'string' && v.length > 80 ? `${v.slice(0, 80)}...` : v)));
}
