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
export function emitMetrics(
  namespace: string,
  dimensions: Record<string, string>,
  values: Record<string, number>,
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
          { Namespace: namespace, Dimensions: [Object.keys(dimensions)], Metrics: names.map((Name) => ({ Name, Unit: unit })) },
        ],
      },
      ...dimensions,
      ...values,
    }),
  );
}
