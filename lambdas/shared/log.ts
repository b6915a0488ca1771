/**
 * Structured JSON logs, one object a line, with the trace id on every line a job touches,
 * and metrics in CloudWatch embedded metric format (EMF) so they need no API call.
 */
export type Fields = Record<string, string | number | boolean | undefined | null | readonly string[]>;

export interface Logger {
  info(message: string, fields?: Fields): void;
  warn(message: string, fields?: Fields): void;
  error(message: string, fields?: Fields): void;
  /** A logger whose every line also carries `fields` (for example the trace id). */
  child(fields: Fields): Logger;
}

export type Sink = (line: string) => void;

const stdout: Sink = (line) => process.stdout.write(line + '\n');

export function createLogger(base: Fields = {}, sink: Sink = stdout): Logger {
  const write = (level: string, message: string, fields?: Fields) =>
    sink(JSON.stringify({ time: new Date().toISOString(), level, message, ...base, ...fields }));
  return {
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (fields) => createLogger({ ...base, ...fields }, sink),
  };
}

export type Unit = 'Count' | 'Seconds' | 'Milliseconds' | 'None';

/**
 * Writes one EMF record: `values` are metrics sharing `dimensions`. CloudWatch extracts
 * them from the log line (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html).
 */
/**
 * The dimension sets one record publishes: the full set and each shorter prefix down to none,
 * so `JobsFailed` exists per pool and reason, per pool, and fleet-wide. CloudWatch alarms
 * need a metric with exactly their dimensions; they cannot sum across a dimension.
 */
export function rollups(keys: readonly string[]): string[][] {
  const sets: string[][] = [];
  for (let n = keys.length; n >= 0; n--) sets.push(keys.slice(0, n));
  return sets;
}

export function emitMetrics(
  namespace: string,
  dimensions: Record<string, string>,
  values: Record<string, number | readonly number[]>,
  unit: Unit = 'Count',
  sink: Sink = stdout,
): void {
  const names = Object.keys(values);
  if (names.length === 0) return;
  sink(
    JSON.stringify({
      _aws: {
        Timestamp: Date.now(),
        CloudWatchMetrics: [
          { Namespace: namespace, Dimensions: rollups(Object.keys(dimensions)), Metrics: names.map((Name) => ({ Name, Unit: unit })) },
        ],
      },
      ...dimensions,
      ...values,
    }),
  );
}

/**
 * Collects counts during one invocation and writes them as few EMF records as possible
 * (one per dimension set and unit) on `flush`. The map is emptied on every flush, so a
 * long-lived container retains nothing between invocations.
 */
export class Metrics {
  private readonly pending = new Map<string, { dims: Record<string, string>; unit: Unit; values: Record<string, number | number[]> }>();
  constructor(
    readonly namespace: string,
    private readonly sink: Sink = stdout,
  ) {}

  add(name: string, dimensions: Record<string, string>, value = 1, unit: Unit = 'Count'): void {
    const key = `${unit}|${JSON.stringify(dimensions)}`;
    let entry = this.pending.get(key);
    if (!entry) {
      entry = { dims: dimensions, unit, values: {} };
      this.pending.set(key, entry);
    }
    const current = entry.values[name];
    if (unit === 'Count') entry.values[name] = ((current as number | undefined) ?? 0) + value;
    // Durations are not summable: EMF takes an array of samples (at most 100 per record).
    else if (Array.isArray(current)) {
      if (current.length < 100) current.push(value);
    } else entry.values[name] = [value];
  }

  flush(): void {
    for (const entry of this.pending.values()) emitMetrics(this.namespace, entry.dims, entry.values, entry.unit, this.sink);
    this.pending.clear();
  }
}
