#!/usr/bin/env node
/**
 * `npm run local`: the whole flow on this machine, no AWS account. See docs/local.md.
 *
 *   npm run local -- [--jobs N] [--pool-size N] [--burst] [--endpoint URL] [--json] [--verbose]
 *                    [--faults] [--drift]
 *
 * Exit status: 0 when every job was sent and served and nothing was left behind, 1 otherwise
 * (also when the run gave up at its deadline), 2 on a usage error.
 */
import { parseArgs } from 'node:util';
import type { LocalEvent } from '../local/events';
import { formatReport } from '../local/report';
import { runScenario, SCENARIO_DEFAULTS, type ScenarioOptions } from '../local/scenario';

const USAGE = `usage: npm run local -- [options]
  --jobs N        jobs per CI provider (default ${SCENARIO_DEFAULTS.jobs}: ${SCENARIO_DEFAULTS.jobs} GitHub and ${SCENARIO_DEFAULTS.jobs} GitLab jobs)
  --pool-size N   parked instances per pool (default ${SCENARIO_DEFAULTS.poolSize})
  --burst         all jobs at once (beyond the pool: the rest launch cold); default: waves the pools serve warm
  --faults        inject the faults: a refused StartInstances, a never-priming instance, forged and duplicate deliveries, a CI 500
  --drift         publish a new launch template version after the pools filled
  --endpoint URL  use this moto server instead of starting one (a fresh one: a moto that holds a fleet is refused)
  --json          print the report as one JSON object
  --verbose       print every event and every Lambda log line as it happens (stderr)
  --deadline S    give up after S seconds (default ${SCENARIO_DEFAULTS.deadlineMs / 1000})`;

function count(name: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) throw new Error(`--${name} must be an integer of at least ${min}, got "${value}"`);
  return n;
}

async function main(): Promise<number> {
  let options: ScenarioOptions;
  let json = false;
  try {
    const { values } = parseArgs({
      options: {
        jobs: { type: 'string' },
        'pool-size': { type: 'string' },
        burst: { type: 'boolean' },
        faults: { type: 'boolean' },
        drift: { type: 'boolean' },
        endpoint: { type: 'string' },
        json: { type: 'boolean' },
        verbose: { type: 'boolean' },
        deadline: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    });
    if (values.help) {
      console.log(USAGE);
      return 0;
    }
    if (values.endpoint !== undefined && !/^https?:\/\/[^/]+/.test(values.endpoint)) throw new Error(`--endpoint must be an http(s) URL, got "${values.endpoint}"`);
    json = values.json ?? false;
    const start = Date.now();
    const jobs = count('jobs', values.jobs, 0);
    const poolSize = count('pool-size', values['pool-size'], 0);
    const deadline = count('deadline', values.deadline, 10);
    const verbose = values.verbose ?? false;
    options = {
      ...(jobs === undefined ? {} : { jobs }),
      ...(poolSize === undefined ? {} : { poolSize }),
      ...(deadline === undefined ? {} : { deadlineMs: deadline * 1000 }),
      burst: values.burst ?? false,
      drift: values.drift ?? false,
      ...(values.faults ? { faults: { refuseStart: true, stallPriming: true, badSignature: true, duplicate: true, ciError: true } } : {}),
      ...(values.endpoint ? { endpoint: values.endpoint } : {}),
      ...(verbose
        ? {
            onEvent: (e: LocalEvent) => process.stderr.write(`${((e.t - start) / 1000).toFixed(2).padStart(7)}s ${describe(e)}\n`),
            onLog: (fn: string, line: string) => process.stderr.write(`          [${fn}] ${line}\n`),
          }
        : { onEvent: (e: LocalEvent) => progress(e, start) }),
    };
  } catch (e) {
    console.error(`${(e as Error).message}\n${USAGE}`);
    return 2;
  }
  // Ctrl-C ends the run where it is and still stops what it started (the instances' boot
  // scripts run in sessions of their own, which would outlive an abrupt exit); a second one exits at once.
  const interrupt = new AbortController();
  const onSignal = () => {
    if (interrupt.signal.aborted) process.exit(130);
    process.stderr.write('stopping: the report follows once everything started is stopped (again to exit at once)\n');
    interrupt.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  const result = await runScenario({ ...options, signal: interrupt.signal });
  if (interrupt.signal.aborted) {
    console.log(json ? JSON.stringify(result.report, null, 2) : formatReport(result.report));
    return 130;
  }
  const r = result.report;
  if (json) console.log(JSON.stringify(r, null, 2));
  else console.log(formatReport(r));
  return r.settled && r.unserved === 0 && r.leftovers === 0 ? 0 : 1;
}

function describe(e: LocalEvent): string {
  const parts = [e.kind.padEnd(16), e.provider && e.ciJobId ? `${e.provider}:${e.ciJobId}` : '', e.instanceId ?? '', e.traceId ? `trace=${e.traceId}` : '', e.detail === undefined ? '' : String(e.detail)];
  return parts.filter(Boolean).join(' ');
}

/** One line per job event on stderr, so a run shows life without --verbose. */
function progress(e: LocalEvent, start: number): void {
  if (!process.stderr.isTTY) return;
  if (e.kind === 'webhook-received' || e.kind === 'job-done' || e.kind === 'dead-lettered') {
    process.stderr.write(`${((e.t - start) / 1000).toFixed(1).padStart(6)}s ${describe(e)}\n`);
  }
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (e: unknown) => {
    // A usage problem found late (a used moto) is one line; anything else gets its stack.
    const error = e as Error;
    console.error(`npm run local failed: ${error.message.startsWith('this moto already holds') ? error.message : (error.stack ?? String(e))}`);
    process.exitCode = 1;
  },
);
