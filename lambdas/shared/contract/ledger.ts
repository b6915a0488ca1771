/**
 * The latency ledger of a job: the stages its trace passes, each stamped once with its time,
 * by the component that sees it. The Lambdas write a structured log line and an EMF sample per
 * stage; the boot script writes a `key=value` boot-log line that the instance log group's
 * transformer and metric filters turn into the same metric. Stages, keys and the metric are
 * named here once; the boot script receives its keys by rendering (lib/user-data.ts).
 */

/** Who stamps a stage, and the moment its seconds are counted from. */
export interface LedgerStageSpec {
  /**
   * The webhook, scale-up, the instance's boot script, or the CI provider's own record.
   * `intake` (`received`, `queued`): the webhook for a job whose pool it resolved, else
   * scale-up, once per job (a reconciled copy, a GitLab job queued with its tags unresolved:
   * shared/ledger.ts `senderStampsIntake`).
   */
  readonly by: 'intake' | 'scale-up' | 'instance' | 'provider';
  /**
   * `received`: the fleet's receipt of the job (the job message's `receivedAt`: the webhook's
   * receipt of its delivery, or the reconciler's finding of it).
   * `activated`: the instance's activation tag (the boot script has nothing earlier).
   * `created`: the job's creation at the CI provider (the job message's `createdAt`; for
   * job-started, the provider's own creation time in the start delivery).
   */
  readonly since: 'received' | 'activated' | 'created';
}

/**
 * The stages, in the order a warm job passes them (a cold job launches before it registers:
 * each line carries its own time, so the order of the lines is not the order of the stages).
 */
export const LEDGER_STAGES = {
  /**
   * The fleet learnt of the job (the webhook verified its delivery, or the reconciler found
   * it), measured from the job's creation: the time it waited before the fleet knew of it
   * (delivery latency, or a lost delivery's wait for the reconciler). Stamped by the webhook,
   * or by scale-up once per job for a reconciled copy (the reconciler queues a waiting job
   * again at every run: only its first finding is the fleet's first knowledge). Not stamped
   * when the job's creation time is unknown (the message has no `createdAt`).
   */
  received: { by: 'intake', since: 'created' },
  /**
   * The job message is in the jobs queue: the webhook's send answered, or, stamped by
   * scale-up with `received`, the message's SQS `SentTimestamp`.
   */
  queued: { by: 'intake', since: 'received' },
  /** Scale-up took the message from the queue (first receive only). */
  dequeued: { by: 'scale-up', since: 'received' },
  /** The CI provider answered the runner registration used for the job. */
  registered: { by: 'scale-up', since: 'received' },
  /** Warm: the claim of a parked instance held (the config write that refuses to overwrite). */
  claimed: { by: 'scale-up', since: 'received' },
  /** Cold: CreateFleet answered with the job's instance. */
  launched: { by: 'scale-up', since: 'received' },
  /** Warm: StartInstances answered; cold: the config is written and the runner id tagged, so the booting instance can start. */
  'instance-started': { by: 'scale-up', since: 'received' },
  /** The boot script began (RUN boots of activated instances). */
  'boot-began': { by: 'instance', since: 'activated' },
  /** The boot script started the runner (the activation-latency line's moment). */
  'runner-started': { by: 'instance', since: 'activated' },
  /** The runner's output shows it took its job (the line the job-started tag follows). */
  'job-taken': { by: 'instance', since: 'activated' },
  /** The CI provider's `started_at` (GitHub) or `build_started_at` (GitLab) for the job. */
  'job-started': { by: 'provider', since: 'created' },
} as const satisfies Record<string, LedgerStageSpec>;

export type LedgerStage = keyof typeof LEDGER_STAGES;
export const LEDGER_STAGE_NAMES = Object.keys(LEDGER_STAGES) as LedgerStage[];
export const INSTANCE_LEDGER_STAGES = LEDGER_STAGE_NAMES.filter((s) => LEDGER_STAGES[s].by === 'instance');

/** The `message` of every Lambda ledger line: Logs Insights filters on it. */
export const LEDGER_MESSAGE = 'ledger';

/**
 * The boot script's ledger line: `<time> start-runner[pid]: trace-id=<id> ledger-pool=<pool>
 * ledger-stage=<stage> ledger-seconds=<s>`. Pool, stage and seconds only (nothing secret): the
 * transformer parses them into the fields below.
 */
export const LEDGER_LOG_KEYS = {
  pool: 'ledger-pool',
  stage: 'ledger-stage',
  seconds: 'ledger-seconds',
} as const;

/** The fields the instance log group's transformer extracts from a boot-log ledger line. */
export const LEDGER_LOG_FIELDS = {
  pool: 'ledger_pool',
  stage: 'ledger_stage',
  seconds: 'ledger_seconds',
} as const;

/** One Lambda ledger line's fields (besides the logger's time, level and message). */
export interface LedgerEntry {
  readonly traceId: string;
  readonly jobId: string;
  readonly pool: string;
  readonly stage: LedgerStage;
  /** ISO 8601: when the stage happened. */
  readonly at: string;
  /** Seconds from the stage's origin (`LEDGER_STAGES[stage].since`) to `at`, to the millisecond. */
  readonly seconds: number;
}

/** A ledger entry of `stage` at `at`, measured from `origin`. */
export function ledgerEntry(job: { traceId: string; jobId: string }, pool: string, stage: LedgerStage, at: Date, origin: Date | string): LedgerEntry {
  const from = typeof origin === 'string' ? Date.parse(origin) : origin.getTime();
  return { traceId: job.traceId, jobId: job.jobId, pool, stage, at: at.toISOString(), seconds: Math.round(at.getTime() - from) / 1000 };
}
