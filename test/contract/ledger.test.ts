import { describe, expect, it } from 'vitest';
import { buildFleetConfig, INSTANCE_LEDGER_STAGES, LEDGER_MESSAGE, LEDGER_STAGE_NAMES, LEDGER_STAGES, ledgerEntry, Provider } from '../../lambdas/shared/contract';
import { LedgerWriter, ledgerMetricRecord } from '../../lambdas/shared/ledger';
import { createLogger } from '../../lambdas/shared/log';

const config = buildFleetConfig({
  prefix: 'ledger-test',
  github: { appId: '1', organization: 'acme' },
  pools: [{ name: 'linux', provider: Provider.GITHUB, labels: ['linux'], launchTemplateId: 'lt-1', launchTemplateVersion: '1', subnetIds: ['s'], instanceTypes: ['t3.micro'] }],
});
const job = { traceId: 'trace-1', jobId: 'github:7' };

describe('latency ledger contract', () => {
  it('names every stage once, with who stamps it; the instance stages are the boot script\'s three', () => {
    expect(LEDGER_STAGE_NAMES).toEqual(['received', 'queued', 'dequeued', 'registered', 'claimed', 'launched', 'instance-started', 'boot-began', 'runner-started', 'job-taken', 'job-started']);
    expect(INSTANCE_LEDGER_STAGES).toEqual(['boot-began', 'runner-started', 'job-taken']);
    expect(LEDGER_STAGES['job-started']).toEqual({ by: 'provider', since: 'created' });
  });

  it('measures an entry from its origin to the millisecond, from a Date or the ISO string a job message carries', () => {
    const at = new Date('2026-12-01T10:00:03.250Z');
    expect(ledgerEntry(job, 'linux', 'queued', at, '2026-12-01T10:00:00.000Z')).toEqual({
      traceId: 'trace-1',
      jobId: 'github:7',
      pool: 'linux',
      stage: 'queued',
      at: '2026-12-01T10:00:03.250Z',
      seconds: 3.25,
    });
    // A clock behind the origin (another host's) gives a negative figure, not a clamp.
    expect(ledgerEntry(job, 'linux', 'job-started', new Date('2026-12-01T09:59:59.999Z'), new Date('2026-12-01T10:00:00.000Z')).seconds).toBe(-0.001);
  });

  it('writes EMF per pool and stage and per stage fleet-wide, never a per-pool figure across stages', () => {
    const entry = ledgerEntry(job, 'linux', 'claimed', new Date('2026-12-01T10:00:04.500Z'), '2026-12-01T10:00:00.000Z');
    expect(JSON.parse(ledgerMetricRecord(config.metrics, entry))).toEqual({
      _aws: {
        Timestamp: Date.parse('2026-12-01T10:00:04.500Z'),
        CloudWatchMetrics: [{ Namespace: 'CdkWarmRunners/ledger-test', Dimensions: [['Pool', 'Stage'], ['Stage']], Metrics: [{ Name: 'JobStageSeconds', Unit: 'Seconds' }] }],
      },
      Pool: 'linux',
      Stage: 'claimed',
      JobStageSeconds: 4.5,
    });
  });

  it("keeps a negative figure (a provider clock ahead of the Lambda's) in the log line but sends 0 to CloudWatch, whose percentiles fail on any negative value", () => {
    const logs: string[] = [];
    const metrics: string[] = [];
    const writer = new LedgerWriter(config.metrics, createLogger({ fn: 'test' }, (l) => logs.push(l)), (l) => metrics.push(l));
    // A job "created" 1.5 s after the fleet received it: the provider's clock runs ahead.
    const message = { ...job, receivedAt: '2026-12-01T10:00:00.000Z', createdAt: '2026-12-01T10:00:01.500Z' } as Parameters<LedgerWriter['stampQueued']>[0];
    writer.stampQueued(message, 'linux', new Date('2026-12-01T10:00:00.200Z'));
    expect(logs.map((l) => (JSON.parse(l) as { stage: string; seconds: number })).map((l) => [l.stage, l.seconds])).toEqual([['received', -1.5], ['queued', 0.2]]);
    expect(metrics.map((m) => (JSON.parse(m) as { Stage: string; JobStageSeconds: number })).map((m) => [m.Stage, m.JobStageSeconds])).toEqual([['received', 0], ['queued', 0.2]]);
  });

  it('stamps a log line and an EMF record per stage, several in the order they happened', () => {
    const logs: string[] = [];
    const metrics: string[] = [];
    const writer = new LedgerWriter(config.metrics, createLogger({ fn: 'test' }, (l) => logs.push(l)), (l) => metrics.push(l));
    const t = (s: number) => new Date(Date.parse('2026-12-01T10:00:00.000Z') + s * 1000);
    // A claim-first lane registers after its claim: stamped as it happened.
    writer.stampAll(job, 'linux', [['registered', t(2)], ['claimed', t(1)], ['instance-started', t(3)], ['launched', undefined]], t(0));
    const lines = logs.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.map((l) => [l.message, l.stage, l.seconds, l.traceId, l.jobId, l.pool])).toEqual([
      [LEDGER_MESSAGE, 'claimed', 1, 'trace-1', 'github:7', 'linux'],
      [LEDGER_MESSAGE, 'registered', 2, 'trace-1', 'github:7', 'linux'],
      [LEDGER_MESSAGE, 'instance-started', 3, 'trace-1', 'github:7', 'linux'],
    ]);
    expect(metrics.map((m) => (JSON.parse(m) as { Stage: string }).Stage)).toEqual(['claimed', 'registered', 'instance-started']);
  });
});
