/**
 * `npm run local -- --scale-set`: a scale-set pool and a webhook pool of the same labels side by
 * side (docs/local.md "Scale sets"). The GitHub jobs that name the scale set are assigned to it
 * by the loopback GitHub and served through the listener and scale-up's demand path; the others
 * go through the webhook. The seed plans the listener's faults (`planScaleSetFaults`); the proof
 * (`buildScaleSetProof`) and the two paths' figures (`scaleSetFigures`) are pure, table-tested in
 * test/local/orch-scale-set.test.ts.
 */
import type { GitHubRequest } from './ci/github-server';
import type { LoopbackSessionRecord } from './ci/scale-set-service';
import { seededRandom } from './fault-plan';

/** The scale set of the sandbox's scale-set pool: what its jobs put in `runs-on`. */
export const LOCAL_SCALE_SET = { pool: 'linux-x64-scale-set', name: 'cwr-linux-x64' } as const;

/**
 * The listener's faults. Each is injected at a moment of the run the seed picks:
 * - `poller-killed`: the invocation holding the lease stops dead mid-poll (no release, no
 *   acknowledgement): the next one waits for the lease's expiry;
 * - `second-poller`: one more invocation started while the lease is held;
 * - `foreign-lease`: another holder (a poller of another container) takes the lease when it is
 *   free and never gives it back: the pollers wait for its expiry;
 * - `lease-taken-over`: while an invocation holds the lease, another container's poller, its
 *   clock ahead, finds it expired and takes it (the listener's acquire), then is gone: the
 *   holder's next renewal finds it lost, it stops (`lease-lost`) and polls no more;
 * - `message-redelivered`: a message's acknowledgement is lost before it was applied (both
 *   attempts of the client): the message is delivered again;
 * - `ack-lost-after-applied`: an acknowledgement applied whose answer was lost;
 * - `session-expired`: the scale set's session expires at GitHub;
 * - `queue-token-expired`: the session's message queue token expires.
 */
export const SCALE_SET_FAULTS = ['poller-killed', 'second-poller', 'foreign-lease', 'message-redelivered', 'ack-lost-after-applied', 'session-expired', 'queue-token-expired', 'lease-taken-over'] as const;
export type ScaleSetFault = (typeof SCALE_SET_FAULTS)[number];
/** Where in the run a fault is injected: around the two waves of jobs. */
export const FAULT_MOMENTS = ['before-wave-1', 'after-wave-1', 'before-wave-2', 'after-wave-2'] as const;
export type FaultMoment = (typeof FAULT_MOMENTS)[number];
/** The five seeds the end-to-end test knows; any five consecutive seeds inject every fault. */
export const SCALE_SET_SEEDS = [1, 2, 3, 4, 5] as const;

export interface PlannedScaleSetFault {
  readonly fault: ScaleSetFault;
  readonly moment: FaultMoment;
  /** Wait after the moment before injecting (ms, before the slowdown). */
  readonly delayMs: number;
}

/**
 * Faults after which the next poll is a new holder's or a new session's: that holder refreshes
 * (or opens) the session anyway, so an expired queue token beside them would never be refused.
 */
const HAND_OVER_FAULTS: readonly ScaleSetFault[] = ['poller-killed', 'foreign-lease', 'lease-taken-over', 'session-expired'];

/**
 * The faults of a seed: fault i when (i - seed) mod 5 is 0 or 1, so every fault is in two of
 * any five consecutive seeds (2 to 4 per seed); the moment and the delay from the seed's PRNG.
 * The moments come in two halves close in time (around wave 1, around wave 2): the queue token's
 * expiry goes to a half with no hand-over fault when there is one, else at least to a moment
 * with none.
 */
export function planScaleSetFaults(seed: number): PlannedScaleSetFault[] {
  const random = seededRandom(seed);
  const plan = SCALE_SET_FAULTS.filter((_, i) => (((i - seed) % 5) + 5) % 5 < 2).map((fault) => ({
    fault,
    moment: FAULT_MOMENTS[Math.floor(random() * FAULT_MOMENTS.length)]!,
    delayMs: Math.floor(random() * 3_000),
  }));
  const half = (m: FaultMoment) => Math.floor(FAULT_MOMENTS.indexOf(m) / 2);
  const handOvers = plan.filter((p) => HAND_OVER_FAULTS.includes(p.fault)).map((p) => p.moment);
  return plan.map((p) => {
    if (p.fault !== 'queue-token-expired') return p;
    // Its own moment first, then the same place in the other half, then the rest.
    const from = FAULT_MOMENTS.indexOf(p.moment);
    const order = [0, 2, 1, 3].map((k) => FAULT_MOMENTS[(from + k) % FAULT_MOMENTS.length]!);
    const moment = order.find((m) => !handOvers.some((h) => half(h) === half(m))) ?? order.find((m) => !handOvers.includes(m)) ?? p.moment;
    return { ...p, moment };
  });
}

/** One holding of a lease, as the sandbox's recorder saw the table's writes (epoch ms). */
export interface LeaseHolding {
  readonly holder: string;
  /** When the conditional write that took it had been answered. */
  readonly acquiredAt: number;
  /** The lease's expiry as the item holds it. */
  readonly expiresAt: number;
  /** When its holder began to give it back, or another displaced it (absent: neither: killed, or another holder). */
  readonly releasedAt?: number;
  /** The scale-set pool whose lease it is (absent: matched to any pool's demands). */
  readonly pool?: string;
  /** The expiry each answered write on it set (the acquire, each renewal, a release's hold), from when it was answered, in order; absent: `expiresAt` from `acquiredAt`. */
  readonly terms?: readonly { readonly from: number; readonly expiresAt: number }[];
}

/** One demand of a listener invocation (its synchronous invocation of scale-up), as the sandbox saw it (epoch ms). */
export interface DemandRecord {
  /** The invocation that sent it: the lease holder it was sent under. */
  readonly holder: string;
  readonly pool: string;
  readonly sentAt: number;
  /** When scale-up answered, even if the invocation was killed meanwhile (absent: still running at the run's end). */
  readonly answeredAt?: number;
}

/** A fault as the run injected it, and what showed it took effect. */
export interface InjectedFault {
  readonly fault: ScaleSetFault;
  readonly moment: FaultMoment;
  /** Seconds since the run's start; absent: never injected (the run ended first). */
  readonly at?: number;
  /** What was observed of it (a redelivery, a new session, ...); absent: no effect seen. */
  readonly effect?: string;
}

/** One job of the scale-set pool, as the loopback GitHub holds it at the end. */
export interface ScaleSetJobView {
  readonly ciJobId: string;
  /** The scale set the loopback assigned it to (absent: none). */
  readonly assignedTo?: number;
  readonly done: boolean;
  readonly runnerName?: string;
}

export interface ScaleSetProof {
  readonly scaleSetId: number;
  readonly jobs: { readonly sent: number; readonly assigned: number; readonly done: number };
  readonly sessions: { readonly opened: number; readonly maxActive: number; readonly maxConcurrentPolls: number; readonly ended: Readonly<Record<string, number>> };
  readonly lease: { readonly holdings: number; readonly holders: number; readonly maxHolders: number };
  /** The listener's demands on scale-up, and the most of one scale set's running at once. */
  readonly demands: { readonly sent: number; readonly maxAtOnce: number };
  readonly faults: readonly InjectedFault[];
  /** What the loopback still held after the scale-set resource's Delete, and the lease item on moto. */
  readonly afterDelete: { readonly scaleSets: number; readonly sessions: number; readonly leaseItems: number };
  /** Runners the scale set registered (its JIT configs) for the jobs assigned to it. */
  readonly runners: { readonly registered: number; readonly assigned: number };
  readonly failures: readonly string[];
  readonly passed: boolean;
}

/** The most intervals [start, end) open at once (an end at the same moment as a start comes first). */
export function maxOverlap(intervals: readonly { readonly start: number; readonly end: number }[]): number {
  const points = intervals.flatMap((i) => [
    { t: i.start, d: 1 },
    { t: i.end, d: -1 },
  ]);
  points.sort((a, b) => a.t - b.t || a.d - b.d);
  let open = 0;
  let max = 0;
  for (const p of points) {
    open += p.d;
    max = Math.max(max, open);
  }
  return max;
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

/**
 * Two demands for one scale set running at once (each pair named once): scale-up would read
 * the same shortfall twice and start runners for it twice. The lease exists to prevent it.
 */
export function overlappingDemands(demands: readonly DemandRecord[], endedAt: number): string[] {
  const end = (d: DemandRecord) => d.answeredAt ?? endedAt;
  const out: string[] = [];
  demands.forEach((a, i) => {
    for (const b of demands.slice(i + 1)) {
      const both = Math.min(end(a), end(b)) - Math.max(a.sentAt, b.sentAt);
      if (a.pool === b.pool && both > 0) out.push(`demands of ${a.holder} and ${b.holder} on scale-up for ${a.pool} ran at once (for ${seconds(both)})`);
    }
  });
  return out;
}

/**
 * Demands not within their invocation's holding of the lease: each must be sent while the
 * holding it was sent under lasts (after its acquire, before its release or displacement) and
 * be answered before the expiry the last write before it set (the renewal right before a
 * demand) and before the holding ended. A later renewal does not cover a demand already sent.
 */
export function demandsOutsideLease(demands: readonly DemandRecord[], holdings: readonly LeaseHolding[], endedAt: number): string[] {
  const out: string[] = [];
  for (const d of demands) {
    const h = holdings.findLast((x) => x.holder === d.holder && (x.pool === undefined || x.pool === d.pool) && x.acquiredAt <= d.sentAt);
    if (!h) {
      out.push(`a demand of ${d.holder} for ${d.pool} was sent while it held no lease`);
      continue;
    }
    const terms = h.terms ?? [{ from: h.acquiredAt, expiresAt: h.expiresAt }];
    const term = terms.findLast((t) => t.from <= d.sentAt) ?? terms[0]!;
    const until = Math.min(term.expiresAt, h.releasedAt ?? Infinity);
    const end = d.answeredAt ?? endedAt;
    if (d.sentAt >= until) out.push(`a demand of ${d.holder} for ${d.pool} was sent ${seconds(d.sentAt - until)} after its holding of the lease ended`);
    else if (end > until) out.push(`a demand of ${d.holder} for ${d.pool} ran ${seconds(end - until)} past its holding of the lease`);
  }
  return out;
}

export function buildScaleSetProof(input: {
  readonly scaleSetId: number;
  readonly jobs: readonly ScaleSetJobView[];
  /** Each runner name that took a job, per job (the CI server's job-done record). */
  readonly runnersOfJob: (ciJobId: string) => readonly string[];
  /** Jobs each runner took (any pool's): a runner of the scale set takes one. */
  readonly jobsOfRunner: (runnerName: string) => readonly string[];
  readonly sessions: readonly LoopbackSessionRecord[];
  readonly maxConcurrentPolls: number;
  readonly leases: readonly LeaseHolding[];
  /** The listener's demands on scale-up, each with the invocation (lease holder) that sent it. */
  readonly demands: readonly DemandRecord[];
  readonly faults: readonly InjectedFault[];
  /** Things of the run left behind (instances, runner configs, registrations), one line each. */
  readonly leftovers: readonly string[];
  readonly afterDelete: { readonly scaleSets: number; readonly sessions: number; readonly leaseItems: number };
  /**
   * JIT configs the loopback generated for the scale set. GitHub hands a queued job to one
   * runner and the loopback deletes a JIT runner after its job, so "two runners for a job" shows
   * as a surplus runner: more registered than jobs assigned (it idles and is reclaimed).
   */
  readonly runnersRegistered: number;
  /** Session creates of the scale set answered 409 (a second poller opened one beside the holder's). */
  readonly sessionConflicts: number;
  /** GetMessage/DeleteMessage answered 401 outside an injected queue-token expiry (`queueRefusalsOutsideFaults`). */
  readonly unexpectedQueueRefusals: number;
  /** When the run ended (epoch ms): an open session or lease counts until then. */
  readonly endedAt: number;
}): ScaleSetProof {
  const failures: string[] = [];
  const { scaleSetId } = input;
  for (const j of input.jobs) {
    if (j.assignedTo !== scaleSetId) failures.push(`job ${j.ciJobId} was not assigned to the scale set (${j.assignedTo ?? 'to none'})`);
    if (!j.done) failures.push(`job ${j.ciJobId} of the scale set did not complete`);
    const runners = input.runnersOfJob(j.ciJobId);
    if (runners.length > 1) failures.push(`job ${j.ciJobId} ran on ${runners.length} runners: ${runners.join(', ')}`);
    for (const r of runners) {
      const taken = input.jobsOfRunner(r);
      if (taken.length > 1) failures.push(`runner ${r} took ${taken.length} jobs: ${taken.join(', ')}`);
    }
  }
  const sessions = input.sessions.filter((s) => s.scaleSetId === scaleSetId);
  const maxActive = maxOverlap(sessions.map((s) => ({ start: s.openedAt, end: s.endedAt ?? input.endedAt })));
  if (maxActive > 1) failures.push(`${maxActive} sessions of the scale set were active at once`);
  if (input.maxConcurrentPolls > 1) failures.push(`${input.maxConcurrentPolls} polls of the scale set's queue were open at once`);
  const ended: Record<string, number> = {};
  for (const s of sessions) ended[s.ended ?? 'open'] = (ended[s.ended ?? 'open'] ?? 0) + 1;
  const maxHolders = maxOverlap(input.leases.map((l) => ({ start: l.acquiredAt, end: l.releasedAt ?? l.expiresAt })));
  if (maxHolders > 1) failures.push(`${maxHolders} pollers held the lease at once`);
  failures.push(...overlappingDemands(input.demands, input.endedAt), ...demandsOutsideLease(input.demands, input.leases, input.endedAt));
  // Runners start only through demands: jobs assigned and none recorded means the record is broken, and the two checks above would pass on nothing.
  if (input.jobs.length > 0 && input.demands.length === 0) failures.push(`${input.jobs.length} job(s) assigned to the scale set and no demand on scale-up recorded`);
  const demandPools = [...new Set(input.demands.map((d) => d.pool))];
  const maxDemands = Math.max(0, ...demandPools.map((pool) => maxOverlap(input.demands.filter((d) => d.pool === pool).map((d) => ({ start: d.sentAt, end: d.answeredAt ?? input.endedAt })))));
  for (const f of input.faults) {
    if (f.at === undefined) failures.push(`fault ${f.fault} (${f.moment}) was never injected`);
    else if (f.effect === undefined) failures.push(`fault ${f.fault} (${f.moment}) showed no effect`);
  }
  const assigned = input.jobs.filter((j) => j.assignedTo === scaleSetId).length;
  if (input.runnersRegistered > assigned) failures.push(`${input.runnersRegistered} runner(s) registered through the scale set for ${assigned} assigned job(s): ${input.runnersRegistered - assigned} surplus`);
  if (input.sessionConflicts > 0) failures.push(`${input.sessionConflicts} session create(s) of the scale set answered 409 (a session beside another)`);
  if (input.unexpectedQueueRefusals > 0) failures.push(`${input.unexpectedQueueRefusals} message queue call(s) answered 401 outside an injected token expiry`);
  for (const l of input.leftovers) failures.push(`left behind: ${l}`);
  if (input.afterDelete.leaseItems > 0) failures.push(`${input.afterDelete.leaseItems} lease item(s) of the scale set left in the job-record table after the Delete`);
  if (input.afterDelete.scaleSets > 0) failures.push(`${input.afterDelete.scaleSets} scale set(s) left at GitHub after the Delete`);
  if (input.afterDelete.sessions > 0) failures.push(`${input.afterDelete.sessions} session(s) left open after the Delete`);
  return {
    scaleSetId,
    jobs: { sent: input.jobs.length, assigned, done: input.jobs.filter((j) => j.done).length },
    sessions: { opened: sessions.length, maxActive, maxConcurrentPolls: input.maxConcurrentPolls, ended },
    lease: { holdings: input.leases.length, holders: new Set(input.leases.map((l) => l.holder)).size, maxHolders },
    demands: { sent: input.demands.length, maxAtOnce: maxDemands },
    faults: input.faults,
    afterDelete: input.afterDelete,
    runners: { registered: input.runnersRegistered, assigned },
    failures,
    passed: failures.length === 0,
  };
}

/**
 * The message queue's 401s that no injected token expiry explains: an expiry injected before
 * request `i` (its index in the request log) allows 401s until the next session refresh
 * answered 200 (the holder's cure). Any other 401 means a poller used a token it should not have.
 */
export function queueRefusalsOutsideFaults(requests: readonly Pick<GitHubRequest, 'method' | 'path' | 'status'>[], expiredAt: readonly number[]): number {
  let open = 0;
  let outside = 0;
  requests.forEach((r, i) => {
    open += expiredAt.filter((at) => at === i).length;
    if (r.status === 401 && /\/messages(\/\d+)?$/.test(r.path)) {
      if (open === 0) outside++;
    } else if (r.method === 'PATCH' && /\/sessions\/[^/]+$/.test(r.path) && r.status === 200) open = 0;
  });
  return outside;
}

type QueueRequest = Pick<GitHubRequest, 'method' | 'path' | 'status'>;
type Delivery = { readonly scaleSetId: number; readonly messageId: number; readonly redelivery: boolean };
const isAck = (r: QueueRequest) => r.method === 'DELETE' && /\/messages\/\d+$/.test(r.path);
const ackedId = (r: QueueRequest) => Number(/\/messages\/(\d+)$/.exec(r.path)?.[1]);

/**
 * The effects of the faults on the message queue, read off the loopback's request log and
 * delivery log since the injection (undefined: no effect seen, the proof fails).
 */
export const queueEffects = {
  /** A 401 on the session's queue after the expiry, then a refresh of that session answered 200. */
  tokenExpired(requests: readonly QueueRequest[], sessionId: string): string | undefined {
    const refused = requests.findIndex((r) => r.status === 401 && r.path.includes(`/sessions/${sessionId}/messages`));
    const refreshed = refused >= 0 && requests.slice(refused + 1).some((r) => r.method === 'PATCH' && r.path.endsWith(`/sessions/${sessionId}`) && r.status === 200);
    return refreshed ? `session ${sessionId}: the queue answered 401, the session was refreshed (200)` : undefined;
  },
  /** The message whose acknowledgement answered 503 (before it applied) delivered again. */
  redelivered(requests: readonly QueueRequest[], delivered: readonly Delivery[], scaleSetId: number): string | undefined {
    const lost = requests.find((r) => isAck(r) && r.status === 503);
    if (!lost) return undefined;
    const id = ackedId(lost);
    return delivered.some((d) => d.scaleSetId === scaleSetId && d.messageId === id && d.redelivery) ? `message ${id}: its acknowledgement was lost, it was delivered again` : undefined;
  },
  /** An acknowledgement applied whose answer was lost (503): the client's resend answered 204 (or 404, taken as done) and the message never came again. */
  ackResent(requests: readonly QueueRequest[], delivered: readonly Delivery[], scaleSetId: number): string | undefined {
    const acks = requests.filter(isAck);
    const lost = acks.findIndex((r) => r.status === 503);
    if (lost < 0) return undefined;
    const id = ackedId(acks[lost]!);
    const resend = acks.slice(lost + 1).find((r) => ackedId(r) === id);
    const again = delivered.some((d) => d.scaleSetId === scaleSetId && d.messageId === id && d.redelivery);
    if (!resend || (resend.status !== 204 && resend.status !== 404) || again) return undefined;
    return `message ${id}: the acknowledgement was applied and its answer lost (503); the client's resend answered ${resend.status}, no redelivery`;
  },
};

/** The first holding after `mine` by another holder: a poller took the lease again after a fault on it. */
export function nextHolding<H extends Pick<LeaseHolding, 'holder' | 'acquiredAt'>>(holdings: readonly H[], mine: H): H | undefined {
  return holdings.find((x) => x.acquiredAt > mine.acquiredAt && x.holder !== mine.holder);
}

/** Which path a GitHub request of the fleet belongs to (the runners' own calls: none). */
export function requestPath(r: Pick<GitHubRequest, 'credential' | 'method' | 'path'>): 'scale-set' | 'webhook' | 'shared' | undefined {
  if (r.credential === 'actions-service') return 'scale-set';
  if (r.credential !== 'app' && r.credential !== 'installation') return undefined;
  if (/\/actions\/runners\/registration-token$/.test(r.path)) return 'scale-set';
  if (/\/actions\/runners\/generate-jitconfig$/.test(r.path) || /\/actions\/(jobs|runs)(\/|$)/.test(r.path)) return 'webhook';
  return 'shared';
}

export interface PathFigures {
  readonly jobs: number;
  readonly warm: number;
  readonly cold: number;
  /** Seconds from the job's creation at GitHub to its start on a runner (nearest rank). */
  readonly toStartSeconds?: { readonly p50: number; readonly max: number };
  /** The fleet's GitHub requests of this path (REST and, for the scale set, the Actions service's). */
  readonly requests: number;
  /** Per job, the scale set's long polls aside (they come with time, not with jobs: `longPolls`). */
  readonly requestsPerJob: number;
  /** REST registration calls: generate-jitconfig (webhook) or registration-token (scale set). */
  readonly registrationCalls: number;
}

export interface ScaleSetFigures {
  readonly scaleSet: PathFigures & {
    readonly actionsServiceRequests: number;
    /** GetMessage polls: one per long-poll window (deployed 50 s) or message, whatever the jobs. */
    readonly longPolls: number;
    /** Runners registered through the scale set (its JIT configs). */
    readonly runners: number;
    /** The Actions service's requests by what they are for: each comes with time (polls, a listener invocation's lookups), a message or a runner. */
    readonly actionsServiceByKind: Readonly<Record<string, number>>;
  };
  readonly webhook: PathFigures;
  /** Requests of neither path alone: installation tokens, the sweep's runner lists and deletes. */
  readonly sharedRequests: number;
  /** REST registration calls the scale-set runners did not spend: one generate-jitconfig each on the webhook path, less the registration tokens. */
  readonly restRegistrationCallsSaved: number;
}

/** A job as the figures read it. */
export interface FigureJob {
  readonly path: 'scale-set' | 'webhook';
  readonly served?: 'warm' | 'cold';
  /** Epoch ms at GitHub. */
  readonly createdAt?: number;
  readonly startedAt?: number;
}

export function scaleSetFigures(jobs: readonly FigureJob[], requests: readonly Pick<GitHubRequest, 'credential' | 'method' | 'path'>[]): ScaleSetFigures {
  const counts = { 'scale-set': 0, webhook: 0, shared: 0 };
  let jit = 0;
  let registrationTokens = 0;
  let actionsService = 0;
  let longPolls = 0;
  let scaleSetRunners = 0;
  const byKind: Record<string, number> = {};
  for (const r of requests) {
    const path = requestPath(r);
    if (path === undefined) continue;
    counts[path]++;
    if (r.credential === 'actions-service') {
      actionsService++;
      if (/\/generatejitconfig$/.test(r.path)) scaleSetRunners++;
      if (r.method === 'GET' && /\/messages$/.test(r.path)) longPolls++;
      const kind = actionsServiceKind(r);
      byKind[kind] = (byKind[kind] ?? 0) + 1;
    } else if (/\/generate-jitconfig$/.test(r.path)) jit++;
    else if (/\/registration-token$/.test(r.path)) registrationTokens++;
  }
  const of = (path: 'scale-set' | 'webhook', registrationCalls: number, polls = 0): PathFigures => {
    const mine = jobs.filter((j) => j.path === path);
    const waits = mine
      .filter((j) => j.createdAt !== undefined && j.startedAt !== undefined)
      .map((j) => (j.startedAt! - j.createdAt!) / 1000)
      .sort((a, b) => a - b);
    const rank = (p: number) => Math.round(waits[Math.max(0, Math.ceil((p / 100) * waits.length) - 1)]! * 10) / 10;
    return {
      jobs: mine.length,
      warm: mine.filter((j) => j.served === 'warm').length,
      cold: mine.filter((j) => j.served === 'cold').length,
      ...(waits.length ? { toStartSeconds: { p50: rank(50), max: rank(100) } } : {}),
      requests: counts[path],
      requestsPerJob: mine.length ? Math.round(((counts[path] - polls) / mine.length) * 10) / 10 : 0,
      registrationCalls,
    };
  };
  return {
    scaleSet: { ...of('scale-set', registrationTokens, longPolls), actionsServiceRequests: actionsService, longPolls, runners: scaleSetRunners, actionsServiceByKind: byKind },
    webhook: of('webhook', jit),
    sharedRequests: counts.shared,
    restRegistrationCallsSaved: scaleSetRunners - registrationTokens,
  };
}

/** What an Actions service request is for (the report's breakdown). */
export function actionsServiceKind(r: Pick<GitHubRequest, 'method' | 'path'>): string {
  if (/\/messages$/.test(r.path)) return 'long poll';
  if (/\/messages\/\d+$/.test(r.path)) return 'acknowledge';
  if (/\/generatejitconfig$/.test(r.path)) return 'jit config';
  if (/\/sessions(\/[^/]+)?$/.test(r.path)) return 'session';
  if (r.path === '/actions/runner-registration') return 'admin token';
  return 'scale set lookup';
}

/** The report's lines for the proof and the figures. */
export function formatScaleSet(p: ScaleSetProof, f: ScaleSetFigures): string[] {
  const path = (name: string, x: PathFigures) =>
    `  ${name}: ${x.jobs} job(s) (warm ${x.warm}, cold ${x.cold}); job created to started ${x.toStartSeconds ? `p50 ${x.toStartSeconds.p50} s, max ${x.toStartSeconds.max} s` : 'n/a'}; ${x.requests} GitHub request(s), ${x.requestsPerJob} per job; ${x.registrationCalls} REST registration call(s)`;
  return [
    `scale set: ${p.passed ? 'PASSED' : 'FAILED'}: ${p.jobs.done} of ${p.jobs.sent} job(s) assigned to scale set ${p.scaleSetId} completed (${p.jobs.assigned} assigned); sessions ${p.sessions.opened} opened, at most ${p.sessions.maxActive} active and ${p.sessions.maxConcurrentPolls} poll(s) open at once (${Object.entries(p.sessions.ended).map(([k, n]) => `${k} ${n}`).join(', ')}); lease taken ${p.lease.holdings} time(s) by ${p.lease.holders} holder(s), at most ${p.lease.maxHolders} at once; ${p.demands.sent} demand(s) on scale-up, at most ${p.demands.maxAtOnce} at once; ${p.runners.registered} runner(s) registered for ${p.runners.assigned} assigned job(s); after the Delete ${p.afterDelete.scaleSets} scale set(s), ${p.afterDelete.sessions} session(s), ${p.afterDelete.leaseItems} lease item(s)`,
    ...p.faults.map((x) => `  fault ${x.fault} (${x.moment}): ${x.at === undefined ? 'NOT injected' : `at ${x.at} s, ${x.effect ?? 'no effect seen'}`}`),
    path('scale-set path', f.scaleSet),
    `    of which ${f.scaleSet.actionsServiceRequests} to the Actions service (${Object.entries(f.scaleSet.actionsServiceByKind).map(([k, n]) => `${k} ${n}`).join(', ')}; per job: the long polls aside); ${f.scaleSet.runners} runner(s) registered through the scale set: ${f.restRegistrationCallsSaved} REST registration call(s) saved`,
    path('webhook path', f.webhook),
    `  shared (installation tokens, the sweep's runner lists and deletes): ${f.sharedRequests} request(s)`,
    ...p.failures.map((x) => `  ${x}`),
  ];
}
