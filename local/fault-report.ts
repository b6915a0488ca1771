import { instanceIdOfRunnerName } from '../lambdas/shared/contract';
import type { LocalEvent } from './events';
import type { FaultPlan } from './fault-plan';
import type { LocalReport, ObservedWorld, ScenarioJob } from './report';

/**
 * The proof of the lossy faults (issue 11, "Prove it locally"), computed from what the CI
 * servers and moto hold at the end (pure): every job not cancelled was served by exactly one
 * runner of this fleet and finished, none was served twice, none was cut off, the cancelled job
 * was not served, and nothing was left behind. The events only add trace ids and retries.
 */
export interface FaultProof {
  readonly seed: number;
  readonly passed: boolean;
  /** What did not hold, when it did not pass. */
  readonly failures: readonly string[];
  /** The jobs' first deliveries: how many, and how many of them the plan dropped or answered 5xx. */
  readonly deliveries: { readonly jobs: number; readonly dropped: number; readonly failed: number };
  readonly served: number;
  readonly cancelled: readonly string[];
  /** Every job's wait (its creation to its start at the CI server) and how the fleet came to serve it. */
  readonly jobs: readonly FaultJob[];
  /** The stray runners of the plan, as observed: the job the first one took, and whether the second died. */
  readonly strays: { readonly takesAnother: string; readonly took?: string; readonly dies: string; readonly died: boolean };
}

export interface FaultJob {
  readonly job: string;
  /**
   * webhook: its delivery; redelivery: the provider resent a failed one; reconciler: found by
   * the reconciler's listing; elsewhere: no message of its own was queued (a runner started
   * for another job, e.g. the cancelled one's, took it first).
   */
  readonly origin: 'webhook' | 'redelivery' | 'reconciler' | 'elsewhere';
  readonly fate?: 'dropped' | 'failed';
  /** Scale-up started another runner for it this many times. */
  readonly retries: number;
  readonly waitSeconds?: number;
  readonly ranOn?: string;
}

export function buildFaultProof(input: {
  readonly plan: FaultPlan;
  readonly jobs: readonly ScenarioJob[];
  readonly events: readonly LocalEvent[];
  readonly world: ObservedWorld;
  readonly report: Pick<LocalReport, 'leftovers' | 'settled' | 'timeline'>;
  readonly prefix: string;
}): FaultProof {
  const { plan, jobs, events, world, report } = input;
  const failures: string[] = [];
  const ci = new Map(world.ciJobs.map((j) => [`${j.provider}:${j.id}`, j]));
  const traceOf = new Map(report.timeline.map((t) => [t.job, t.traceId]));
  const out: FaultJob[] = [];
  for (const job of jobs) {
    const id = `${job.provider}:${job.ciJobId}`;
    const c = ci.get(id);
    const doneEvents = events.filter((e) => e.kind === 'job-done' && e.provider === job.provider && e.ciJobId === job.ciJobId);
    if (job.cancelled) {
      if (!c?.cancelled) failures.push(`${id}: cancelled by the plan, but not cancelled at the CI server`);
      if (c?.done || doneEvents.length > 0) failures.push(`${id}: cancelled, yet served`);
      continue;
    }
    // GitLab's registration (which names the runner) is deleted after the job: then the job-done event names it.
    const ranOn = c?.runnerName ?? doneEvents.find((e) => e.runnerName)?.runnerName;
    if (!c?.done) failures.push(`${id}: not served${c?.failed ? ' (cut off: its runner was lost or deleted mid-job)' : ''}`);
    else if (!ranOn || instanceIdOfRunnerName(input.prefix, ranOn) === undefined) failures.push(`${id}: finished by a runner not of this fleet (${ranOn ?? 'none'})`);
    if (doneEvents.length > 1) failures.push(`${id}: finished ${doneEvents.length} times`);
    const trace = traceOf.get(id);
    const wait = c?.createdAt && c.startedAt ? (Date.parse(c.startedAt) - Date.parse(c.createdAt)) / 1000 : undefined;
    out.push({
      job: id,
      origin: originOf(trace, job),
      ...(job.fate ? { fate: job.fate } : {}),
      retries: events.filter((e) => e.kind === 'retried' && e.provider === job.provider && e.ciJobId === job.ciJobId).length,
      ...(wait === undefined ? {} : { waitSeconds: wait }),
      ...(ranOn ? { ranOn: instanceIdOfRunnerName(input.prefix, ranOn) ?? ranOn } : {}),
    });
  }
  // A job dropped before the webhook can only have come through the reconciler.
  for (const j of out) if (j.fate === 'dropped' && j.origin === 'webhook') failures.push(`${j.job}: dropped before the webhook, yet its served trace is a webhook delivery's`);
  // One runner, one job: a runner name that finished two jobs served one of them twice over.
  const byRunner = new Map<string, number>();
  for (const e of events) if (e.kind === 'job-done' && e.runnerName) byRunner.set(e.runnerName, (byRunner.get(e.runnerName) ?? 0) + 1);
  for (const [runner, n] of byRunner) if (n > 1) failures.push(`runner ${runner} finished ${n} jobs`);
  for (const c of world.ciJobs) if (c.failed) failures.push(`${c.provider}:${c.id}: cut off (failed at the CI server)`);
  if (report.leftovers > 0) failures.push(`${report.leftovers} thing(s) left behind`);
  if (!report.settled) failures.push('the run did not settle');
  const strays = straysOf(plan, jobs, events, world, input.prefix);
  if (strays.took === undefined) failures.push(`${strays.takesAnother}: its first runner took no job (the plan has it take another job's)`);
  else if (strays.took === strays.takesAnother) failures.push(`${strays.takesAnother}: its first runner took its own job, not another's`);
  if (!strays.died) failures.push(`${strays.dies}: its first runner did not die before taking a job`);
  const dropped = jobs.filter((j) => j.fate === 'dropped').length;
  const failed = jobs.filter((j) => j.fate === 'failed').length;
  const total = plan.fates.github.length + plan.fates.gitlab.length;
  return {
    seed: plan.seed,
    passed: failures.length === 0,
    failures,
    deliveries: { jobs: total, dropped, failed },
    served: out.filter((j) => ci.get(j.job)?.done).length,
    cancelled: jobs.filter((j) => j.cancelled).map((j) => `${j.provider}:${j.ciJobId}`),
    jobs: out,
    strays,
  };
}

/** Where the served copy of a job came from: its trace id says (the reconciler's names it). */
function originOf(trace: string | undefined, job: ScenarioJob): FaultJob['origin'] {
  if (trace === undefined) return 'elsewhere';
  if (trace.startsWith('reconciler-')) return 'reconciler';
  return job.fate === 'failed' ? 'redelivery' : 'webhook';
}

function straysOf(plan: FaultPlan, jobs: readonly ScenarioJob[], events: readonly LocalEvent[], world: ObservedWorld, prefix: string): FaultProof['strays'] {
  const github = jobs.filter((j) => j.provider === 'github');
  const firstInstance = (job: ScenarioJob | undefined) => events.find((e) => e.kind === 'started' && e.provider === 'github' && e.ciJobId === job?.ciJobId)?.instanceId;
  const takes = github[plan.takesAnother];
  const dies = github[plan.dies];
  const takerInstance = firstInstance(takes);
  const took = world.ciJobs.find((c) => c.provider === 'github' && c.runnerName !== undefined && takerInstance !== undefined && instanceIdOfRunnerName(prefix, c.runnerName) === takerInstance);
  const dierInstance = firstInstance(dies);
  // The dead runner finished nothing, and its job ran elsewhere.
  const died = dierInstance !== undefined && !events.some((e) => e.kind === 'job-done' && e.runnerName !== undefined && instanceIdOfRunnerName(prefix, e.runnerName) === dierInstance);
  return { takesAnother: `github:${takes?.ciJobId}`, ...(took ? { took: `github:${took.id}` } : {}), dies: `github:${dies?.ciJobId}`, died };
}

/** The proof as the text report shows it: the verdict, the faults, and each job's origin, retries and wait. */
export function formatFaultProof(p: FaultProof): string[] {
  const d = p.deliveries;
  const pct = (n: number) => `${Math.round((100 * n) / Math.max(1, d.jobs))}%`;
  const lines = [
    `lost-job faults (seed ${p.seed}): ${p.passed ? 'PASSED' : 'FAILED'}: ${p.served} served, ${p.cancelled.length} cancelled (${p.cancelled.join(', ') || '-'})`,
    `  of ${d.jobs} job deliveries: ${d.dropped} dropped before the webhook (${pct(d.dropped)}), ${d.failed} answered 5xx (${pct(d.failed)}); GitHub reports busy: false and GitLab lists the runner offline mid-job`,
    `  stray runners: ${p.strays.takesAnother}'s first runner took ${p.strays.took ?? 'nothing'}; ${p.strays.dies}'s first runner ${p.strays.died ? 'died before taking a job' : 'did NOT die'}`,
  ];
  const found = p.jobs.filter((j) => j.origin === 'reconciler' || j.origin === 'redelivery');
  const retried = p.jobs.filter((j) => j.retries > 0);
  const wait = (j: FaultJob) => (j.waitSeconds === undefined ? 'not started' : `waited ${j.waitSeconds.toFixed(1)}s`);
  lines.push(`  found by reconciliation: ${found.map((j) => `${j.job} (${j.origin}${j.fate ? `, ${j.fate}` : ''}, ${wait(j)})`).join(', ') || 'none'}`);
  lines.push(`  retried: ${retried.map((j) => `${j.job} (${j.retries}x, ${wait(j)})`).join(', ') || 'none'}`);
  const waits = p.jobs.map((j) => j.waitSeconds).filter((x): x is number => x !== undefined).sort((a, b) => a - b);
  if (waits.length) lines.push(`  wait from creation to job start: min ${waits[0]!.toFixed(1)}s, median ${waits[Math.floor((waits.length - 1) / 2)]!.toFixed(1)}s, max ${waits.at(-1)!.toFixed(1)}s`);
  for (const f of p.failures) lines.push(`  FAILED: ${f}`);
  return lines;
}
