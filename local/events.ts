/**
 * What the local sandbox (`npm run local`) records as it plays the fleet: each part (the
 * Lambda driver, the instance player, the loopback CI servers) reports events here, and the
 * report joins them into one timeline per job by trace id, instance id or CI job id.
 */
export type LocalEventKind =
  /** The webhook handler answered a delivery (detail: status code). */
  | 'webhook-received'
  /** The job message reached the jobs queue (traceId known from here on). */
  | 'queued'
  /** Scale-up claimed a parked instance or launched a cold one for the job. */
  | 'claimed'
  /** Scale-up started the instance (warm) or it was launched (cold). */
  | 'started'
  /** Scale-up held the job back by its pool's prime back-off: a wait copy in the jobs queue, no launch (detail: why). */
  | 'held'
  /** Scale-up started another runner for a job still queued after its runner went elsewhere (detail: the attempt). */
  | 'retried'
  /** An instance booted (detail: the boot mode it chose). */
  | 'boot'
  /** The boot's install step put the runner on a stock image (detail: its version). */
  | 'runner-installed'
  /** A boot failed and said so (detail: its last error line, e.g. a refused download). */
  | 'boot-failed'
  /** The boot script started the runner (detail: its activation-latency-seconds line). */
  | 'runner-started'
  /** The CI server saw the runner finish its job. */
  | 'job-done'
  /** An instance powered itself off (parked) and was stopped. */
  | 'parked'
  /** An instance reached terminated. */
  | 'instance-gone'
  /** A message reached the dead-letter queue. */
  | 'dead-lettered'
  /** A stage of the job's latency ledger (detail: the stage, contract ledger.ts), at its own time. */
  | 'stage';

export interface LocalEvent {
  /** Epoch milliseconds. */
  readonly t: number;
  readonly kind: LocalEventKind;
  readonly traceId?: string;
  readonly instanceId?: string;
  /** "github" or "gitlab". */
  readonly provider?: string;
  /** The CI job id as the provider spells it (GitHub workflow job id, GitLab build id). */
  readonly ciJobId?: string;
  /** The runner name the CI server saw (carries the instance id, see contract runnerName). */
  readonly runnerName?: string;
  readonly pool?: string;
  /** Free text or a number (latency seconds, status code, boot mode). */
  readonly detail?: string | number;
  /** A ledger stage's seconds from its origin (contract ledger.ts), as its line says. */
  readonly seconds?: number;
}

export type EventSink = (event: LocalEvent) => void;
