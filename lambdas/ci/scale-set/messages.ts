import type { ScaleSetJobEvent, ScaleSetMessage, ScaleSetStatistics } from '../../shared/contract';

/**
 * A GetMessage answer as the client reads it (client.go `parseRunnerScaleSetMessageResponse`,
 * which session_client.go `getMessage` calls on a 200; types.go `RunnerScaleSetMessage`,
 * `JobStarted`, `JobCompleted`): `{messageId, messageType: "RunnerScaleSetJobMessages", body,
 * statistics}` where `body` is a JSON string holding an array of job messages, each with its
 * own `messageType`. JobStarted and JobCompleted are kept; JobAssigned (the statistics count
 * it) and types unknown today are passed over, as that parser does. Anything else is not the
 * documented shape: an error naming what.
 */
export class ScaleSetMessageError extends Error {
  constructor(detail: string) {
    super(`scale set message not understood: ${detail}`);
    this.name = 'ScaleSetMessageError';
  }
}

const STATISTICS = ['totalAvailableJobs', 'totalAcquiredJobs', 'totalAssignedJobs', 'totalRunningJobs', 'totalRegisteredRunners', 'totalBusyRunners', 'totalIdleRunners'] as const;

/**
 * Only `totalAssignedJobs` is required (capacity follows it); an absent count is 0, as Go's
 * decoder leaves an absent field of `RunnerScaleSetStatistic` (types.go) at its zero value.
 */
export function parseStatistics(value: unknown, where: string): ScaleSetStatistics {
  if (typeof value !== 'object' || value === null) throw new ScaleSetMessageError(`${where} has no statistics`);
  const doc = value as Record<string, unknown>;
  const out: Record<string, number> = {};
  for (const key of STATISTICS) {
    const n = doc[key] ?? (key === 'totalAssignedJobs' ? undefined : 0);
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) throw new ScaleSetMessageError(`${where}: statistics.${key} is not a count`);
    out[key] = n;
  }
  return out as unknown as ScaleSetStatistics;
}

export function parseMessage(text: string): ScaleSetMessage {
  let doc: unknown;
  try {
    doc = JSON.parse(text.replace(/^\uFEFF/, ''));
  } catch {
    throw new ScaleSetMessageError('the answer is not JSON');
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new ScaleSetMessageError('the answer is not a JSON object');
  const m = doc as Record<string, unknown>;
  if (typeof m.messageId !== 'number' || !Number.isSafeInteger(m.messageId) || m.messageId < 1) throw new ScaleSetMessageError('messageId is not a positive integer');
  if (m.messageType !== 'RunnerScaleSetJobMessages') throw new ScaleSetMessageError(`message type ${JSON.stringify(m.messageType)} is not RunnerScaleSetJobMessages`);
  const statistics = parseStatistics(m.statistics, `message ${m.messageId}`);
  if (m.body !== undefined && m.body !== null && typeof m.body !== 'string') throw new ScaleSetMessageError(`message ${m.messageId}: body is not a string`);
  let batch: unknown = [];
  if (typeof m.body === 'string' && m.body !== '') {
    try {
      batch = JSON.parse(m.body);
    } catch {
      throw new ScaleSetMessageError(`message ${m.messageId}: body is not JSON`);
    }
  }
  if (!Array.isArray(batch)) throw new ScaleSetMessageError(`message ${m.messageId}: body is not an array of job messages`);
  const events: ScaleSetJobEvent[] = [];
  for (const [i, item] of batch.entries()) {
    const where = `message ${m.messageId}, job message ${i}`;
    if (typeof item !== 'object' || item === null) throw new ScaleSetMessageError(`${where} is not an object`);
    const e = item as Record<string, unknown>;
    if (typeof e.messageType !== 'string') throw new ScaleSetMessageError(`${where} has no messageType`);
    if (e.messageType !== 'JobStarted' && e.messageType !== 'JobCompleted') continue;
    if (typeof e.runnerName !== 'string' || !Number.isSafeInteger(e.runnerId) || typeof e.jobId !== 'string') {
      throw new ScaleSetMessageError(`${where} (${e.messageType}) lacks runnerName, runnerId or jobId`);
    }
    const kind = e.messageType === 'JobStarted' ? 'started' : 'completed';
    events.push({ kind, runnerName: e.runnerName, runnerId: e.runnerId as number, jobId: e.jobId, ...(kind === 'completed' && typeof e.result === 'string' ? { result: e.result } : {}) });
  }
  return { messageId: m.messageId, statistics, events };
}
