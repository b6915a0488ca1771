#!/usr/bin/env node
/**
 * `npm run local`: the whole flow on this machine, no AWS account. See docs/local.md.
 *
 *   npm run local -- [--jobs N] [--pool-size N] [--burst] [--endpoint URL] [--json] [--verbose]
 *                    [--faults [tampered-download]] [--seed N] [--drift] [--roll] [--reuse] [--docker] [--image stock|prebuilt]
 *                    [--apt-pool NAME] [--scopes] [--scale-set [--seed N]]
 *
 * Exit status: 0 when every job was sent and served and nothing was left behind (with
 * --faults tampered-download: when the fleet failed safe; with the lost-job faults: when the
 * fault proof passed, local/fault-report.ts; in both, nothing left behind), 1 otherwise (also
 * when the run gave up at its deadline), 130 when interrupted, 2 on a usage error.
 */
import type { LocalEvent } from '../local/events';
import { parseLocalArgs, USAGE, UsageError, type LocalArgs } from '../local/cli-args';
import { formatReport } from '../local/report';
import { runScenario, type ScenarioOptions } from '../local/scenario';

async function main(): Promise<number> {
  let args: LocalArgs;
  try {
    args = parseLocalArgs(process.argv.slice(2));
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    console.error(`${e.message}\n${USAGE}`);
    return 2;
  }
  if (args.help) {
    console.log(USAGE);
    return 0;
  }
  if (args.endpoint !== undefined) {
    const unreachable = await unreachableReason(args.endpoint);
    if (unreachable !== undefined) {
      console.error(`cannot reach moto at ${args.endpoint} (${unreachable}): start one (python3 -m moto.server -p PORT) or leave out --endpoint to have one started`);
      return 2;
    }
  }
  const json = args.json;
  const start = Date.now();
  const { help: _help, json: _json, verbose, ...scenario } = args;
  const options: ScenarioOptions = {
    ...scenario,
    ...(verbose
      ? {
          onEvent: (e: LocalEvent) => process.stderr.write(`${((e.t - start) / 1000).toFixed(2).padStart(7)}s ${describe(e)}\n`),
          onLog: (fn: string, line: string) => process.stderr.write(`          [${fn}] ${line}\n`),
        }
      : { onEvent: (e: LocalEvent) => progress(e, start) }),
  };
  // Ctrl-C ends the run where it is and still stops what it started (the instances' boot
  // scripts run in sessions of their own, which would outlive an abrupt exit); a second one exits at once.
  // npm run-script relays the group's SIGINT to this process, so one Ctrl-C can arrive twice
  // within milliseconds: only a signal at least half a second after the first is a second one.
  // Run under `node --import tsx`, not the tsx CLI: that CLI SIGKILLs its child when the child
  // has not confirmed a signal within 30 ms, which a loaded machine misses, and a SIGKILLed run
  // leaves moto, the sandbox and the boot scripts behind (no exit hooks run).
  const interrupt = new AbortController();
  let firstSignalAt = 0;
  const onSignal = () => {
    if (interrupt.signal.aborted) {
      if (Date.now() - firstSignalAt >= 500) process.exit(130);
      return;
    }
    firstSignalAt = Date.now();
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
  // A fleet that cannot install its runner passes by failing safe, not by serving.
  // With the lost-job faults the proof decides (a cancelled job is rightly unserved).
  // With --reuse the reuse proof must pass too (hit rate, cache file, nothing else of the earlier job).
  // With --docker the container proof must pass too (every job in its containers, nothing left on the daemon).
  // With --scopes the scopes proof too (each job on its own scope's pool and runner, every App answered).
  // With --scale-set the scale set's proof too (every assigned job served once, one session and one lease holder at a time, nothing left after the Delete).
  const outcome = (r.failSafe ? r.failSafe.passed : r.faultProof ? r.faultProof.passed : r.unserved === 0) && (r.reuse?.passed ?? true) && (r.docker?.passed ?? true) && (r.roll?.passed ?? true) && (r.scopes?.passed ?? true) && (r.scaleSet?.proof.passed ?? true);
  return r.settled && outcome && r.leftovers === 0 ? 0 : 1;
}

/** Why nothing answers HTTP at the URL (any answer, even an error status, is a server). */
async function unreachableReason(url: string): Promise<string | undefined> {
  try {
    await fetch(url, { signal: AbortSignal.timeout(5_000) });
    return undefined;
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return cause?.code ?? cause?.message ?? (e as Error).message;
  }
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
