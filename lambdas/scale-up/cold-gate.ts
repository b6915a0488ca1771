import { errorName } from '../shared/aws-call';
import { describeFleet, type ObservedInstance } from '../shared/instances';
import { readPrimeStreak } from '../shared/prime-state';
import type { ColdGate } from '../pool/backoff';
import { keptTicketFields, messageTicketOwner, type LaunchTickets, type Ticket } from '../shared/launch-tickets';
import { launchRefused, launchUnknown } from './cold';
import type { JobInFlight, StepContext } from './context';
import { poolColdGate } from './decide';

const GONE_STATES = ['shutting-down', 'terminated'];

/**
 * The I/O of the cold gate: per pool with cold launches in this batch, its stored streak (one
 * GetParameter) and its gone instances that carry a start failure or a job start (one
 * filtered DescribeInstances: the batch's observation shows live instances only, and a cold
 * launch that failed is terminated). Then the pure gate (decide.ts `poolColdGate`).
 * Either read failing holds the pool's cold launches: failing safe, as the pool does.
 * `reportHeld: false` for a gate read only for its ticket need (no launch is held by it): a
 * failed take-over spending its ticket.
 */
export async function coldGates(ctx: StepContext, cold: readonly JobInFlight[], live: readonly ObservedInstance[], options: { readonly reportHeld?: boolean } = {}): Promise<Map<string, ColdGate>> {
  const wanted = new Map<string, number>();
  for (const j of cold) wanted.set(j.pool.name, (wanted.get(j.pool.name) ?? 0) + 1);
  const gates = new Map<string, ColdGate>();
  await Promise.all(
    [...wanted].map(async ([name, n]) => {
      const pool = ctx.config.pools.find((p) => p.name === name)!;
      const parameter = ctx.paths.primeState(name);
      const [stored, gone] = await Promise.all([readPrimeStreak(ctx.aws, ctx.ssm, parameter), describeGone(ctx, name)]);
      const unreadable = [stored, gone].find((r): r is { unreadable: string } => r !== undefined && 'unreadable' in r)?.unreadable;
      if (unreadable !== undefined) {
        const fields = { pool: name, parameter, error: unreadable };
        if (options.reportHeld === false) ctx.log.warn('reading the prime back-off failed: the launch ticket of the taken-over instance is not spent; it frees at its expiry', fields);
        else ctx.log.error('reading the prime back-off failed: no cold launch for the pool this batch', fields);
      }
      const streak = unreadable !== undefined || (stored && 'unreadable' in stored) ? 'unreadable' : stored;
      const seen = Array.isArray(gone) ? [...live, ...gone] : live;
      const gate = poolColdGate(streak, pool, seen, ctx.keys, n, ctx.now());
      if (gate.held && options.reportHeld !== false) ctx.log.warn('prime back-off: holding cold launches back', { pool: name, wanted: n, launching: gate.launch, held: gate.held, resumeAt: gate.resumeAt?.toISOString() });
      gates.set(name, gate);
    }),
  );
  return gates;
}

/** The pool's gone instances with a start failure or a job start: the evidence a terminated cold launch leaves. */
async function describeGone(ctx: StepContext, pool: string): Promise<ObservedInstance[] | { readonly unreadable: string }> {
  try {
    return await describeFleet(ctx.aws, ctx.ec2, ctx.keys, { pool, states: GONE_STATES, anyTagKey: [ctx.keys.startFailure, ctx.keys.jobStarted] });
  } catch (error) {
    return { unreadable: errorName(error) };
  }
}

/**
 * The launch tickets of the batch's cold launches (lambdas/shared/launch-tickets.ts): per pool
 * whose gate needs them (an unproven or failing template), the oldest launching jobs take one
 * each; a job that gets none launches nothing and waits, as a held job does. Another
 * invocation (or the pool Lambda) won the slot, or the table did not answer: failing safe.
 * A proven template's gate carries no ticket and its launches pass untouched.
 */
export async function ticketCold(
  ctx: StepContext,
  tickets: LaunchTickets,
  gates: ReadonlyMap<string, ColdGate>,
  launching: readonly JobInFlight[],
  redelivered: (j: JobInFlight) => boolean,
): Promise<{ granted: Map<string, Ticket>; refused: JobInFlight[] }> {
  const granted = new Map<string, Ticket>();
  const refused: JobInFlight[] = [];
  const byPool = new Map<string, JobInFlight[]>();
  for (const j of launching) (byPool.get(j.pool.name) ?? byPool.set(j.pool.name, []).get(j.pool.name)!).push(j);
  await Promise.all(
    [...byPool].map(async ([name, jobs]) => {
      const need = gates.get(name)?.ticket;
      if (!need) return;
      // Owned by the message: its redelivery holds the ticket its earlier receive took (only a
      // redelivery can hold one already).
      const owners = jobs.map((j) => messageTicketOwner(j.key));
      const out = await tickets.take(name, need, jobs.length, ctx.now(), owners, jobs.filter(redelivered).map((j) => messageTicketOwner(j.key)));
      if (out.errors.length) ctx.log.error('taking launch tickets failed: those cold launches wait', { pool: name, errors: out.errors });
      const byOwner = new Map(out.taken.map((t) => [t.owner, t]));
      for (const j of jobs) {
        const ticket = byOwner.get(messageTicketOwner(j.key));
        if (ticket) granted.set(j.key, ticket);
        else refused.push(j);
      }
      if (out.taken.length < jobs.length) ctx.log.warn('prime back-off: launch tickets taken elsewhere, holding cold launches back', { pool: name, wanted: jobs.length, launching: out.taken.length, template: need.template });
    }),
  );
  return { granted, refused };
}

/**
 * A failed cold launch's ticket, on the queue path and the scale-set demand path alike: given
 * back when nothing launched (`launchRefused`: EC2 refused a first send, nothing lost before
 * it); kept under its owner while the launch may have happened (every send lost its answer, or
 * a resend was refused or answered empty after a lost answer: the lost send may still land), so
 * a queue message's redelivery takes it again and a later demand, observing the instance if it
 * lands, launches none beside it; spent when the launch did happen (a failure after it: its
 * instance was terminated), kept until its expiry under a fresh owner, so no redelivery
 * launches on it again.
 */
export async function settleTicket(tickets: LaunchTickets, j: JobInFlight, ticket: Ticket, error: unknown): Promise<void> {
  if (launchRefused(error)) return releaseTicket(tickets, j, ticket);
  if (launchUnknown(error)) {
    j.log.warn('the cold launch may have happened: its launch ticket is kept until its expiry', keptTicketFields(j.pool.name, ticket));
    return;
  }
  const r = await tickets.spend(ticket);
  j.log.warn('the cold launch happened before the failure: its launch ticket is spent until its expiry', { ...keptTicketFields(j.pool.name, ticket), ...(r.spent ? {} : { error: r.error }) });
}

/** A ticket whose launch did not happen, given back; one whose release fails frees at its expiry. */
export async function releaseTicket(tickets: LaunchTickets, j: JobInFlight, ticket: Ticket): Promise<void> {
  const r = await tickets.release(ticket);
  if (!r.released) j.log.warn('releasing the launch ticket failed; it frees at its expiry', { ...keptTicketFields(j.pool.name, ticket), error: r.error });
}
