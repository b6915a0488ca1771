/**
 * Evaluates a synthesized CloudWatch alarm against datapoints, as CloudWatch would: the
 * metric matched by namespace, name and exact dimension set (an alarm cannot sum across a
 * dimension), the statistic per period, metric math of two terms (`a + b`, `a - b`, a missing
 * term 0), the comparison against the threshold, M of N periods, missing periods not breaching. The datapoints come from the EMF records a real handler
 * printed, so a name or dimension spelled differently by the handler and the alarm fails.
 */
export interface Datapoint {
  readonly namespace: string;
  readonly name: string;
  /** Values as the template holds them: strings, or tokens such as `{ Ref: ... }`. */
  readonly dimensions: Record<string, unknown>;
  readonly value: number;
  readonly timestamp: number;
}

/** Every datapoint the EMF records among `lines` publish, once per dimension set each declares. */
export function emfDatapoints(lines: readonly string[]): Datapoint[] {
  const out: Datapoint[] = [];
  for (const line of lines) {
    let record: Record<string, unknown>;
    try {
      record = JSON.parse(line) as Record<string, unknown>;
    } catch {
      continue;
    }
    const aws = record._aws as { Timestamp: number; CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string }[] }[] } | undefined;
    for (const directive of aws?.CloudWatchMetrics ?? []) {
      for (const set of directive.Dimensions) {
        for (const { Name } of directive.Metrics) {
          const raw = record[Name];
          for (const value of Array.isArray(raw) ? (raw as number[]) : [raw as number]) {
            out.push({ namespace: directive.Namespace, name: Name, dimensions: Object.fromEntries(set.map((k) => [k, record[k]])), value, timestamp: aws!.Timestamp });
          }
        }
      }
    }
  }
  return out;
}

type Props = Record<string, unknown>;
type MetricStat = { Metric: { Namespace: string; MetricName: string; Dimensions?: { Name: string; Value: unknown }[] }; Period: number; Stat: string };

const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

function matches(p: Datapoint, namespace: unknown, name: unknown, dims: { Name: string; Value: unknown }[] | undefined): boolean {
  const want = Object.fromEntries((dims ?? []).map((d) => [d.Name, d.Value]));
  return p.namespace === namespace && p.name === name && Object.keys(p.dimensions).length === Object.keys(want).length && Object.entries(want).every(([k, v]) => same(p.dimensions[k], v));
}

function statistic(stat: string, values: number[]): number {
  switch (stat) {
    case 'Sum':
      return values.reduce((a, b) => a + b, 0);
    case 'Maximum':
      return Math.max(...values);
    case 'Minimum':
      return Math.min(...values);
    case 'Average':
      return values.reduce((a, b) => a + b, 0) / values.length;
    case 'SampleCount':
      return values.length;
    default:
      throw new Error(`statistic ${stat} not evaluated here`);
  }
}

/** Per period start (ms), the statistic of the matching datapoints. */
function series(points: readonly Datapoint[], namespace: unknown, name: unknown, dims: MetricStat['Metric']['Dimensions'], periodSeconds: number, stat: string): Map<number, number> {
  const buckets = new Map<number, number[]>();
  for (const p of points.filter((d) => matches(d, namespace, name, dims))) {
    const start = Math.floor(p.timestamp / (periodSeconds * 1000)) * periodSeconds * 1000;
    buckets.set(start, [...(buckets.get(start) ?? []), p.value]);
  }
  return new Map([...buckets].map(([t, v]) => [t, statistic(stat, v)]));
}

/**
 * The alarm's values per period: its metric's, or its math expression's (`a + b`, `a - b` of
 * metric ids). A period where any term has data has a value, a term without data counting as
 * 0: CloudWatch's basic arithmetic on time series treats a missing value as 0 (CloudWatch user
 * guide, "Metric math syntax and functions", basic arithmetic). A period where no term has data has none.
 */
function alarmSeries(props: Props, points: readonly Datapoint[]): { values: Map<number, number>; periodSeconds: number } {
  if (props.MetricName) {
    const periodSeconds = props.Period as number;
    return { periodSeconds, values: series(points, props.Namespace, props.MetricName, props.Dimensions as MetricStat['Metric']['Dimensions'], periodSeconds, props.Statistic as string) };
  }
  const metrics = props.Metrics as { Id: string; Expression?: string; MetricStat?: MetricStat; ReturnData?: boolean }[];
  const terms = new Map(metrics.filter((m) => m.MetricStat).map((m) => [m.Id, series(points, m.MetricStat!.Metric.Namespace, m.MetricStat!.Metric.MetricName, m.MetricStat!.Metric.Dimensions, m.MetricStat!.Period, m.MetricStat!.Stat)]));
  const expression = metrics.find((m) => m.Expression)!;
  const parsed = /^(\w+) ([+-]) (\w+)$/.exec(expression.Expression!);
  if (!parsed) throw new Error(`expression ${expression.Expression} not evaluated here`);
  const [, left, op, right] = parsed as unknown as [string, string, string, string];
  const values = new Map<number, number>();
  for (const t of new Set([...terms.get(left)!.keys(), ...terms.get(right)!.keys()])) {
    const l = terms.get(left)!.get(t) ?? 0;
    const r = terms.get(right)!.get(t) ?? 0;
    values.set(t, op === '+' ? l + r : l - r);
  }
  return { values, periodSeconds: metrics.find((m) => m.MetricStat)!.MetricStat!.Period };
}

const COMPARE: Record<string, (v: number, t: number) => boolean> = {
  GreaterThanOrEqualToThreshold: (v, t) => v >= t,
  GreaterThanThreshold: (v, t) => v > t,
  LessThanOrEqualToThreshold: (v, t) => v <= t,
  LessThanThreshold: (v, t) => v < t,
};

/** Whether the alarm goes to ALARM at some evaluation over `points` (missing data not breaching, as the fleet's alarms treat it). */
export function alarmFires(props: Props, points: readonly Datapoint[]): boolean {
  if (props.TreatMissingData !== 'notBreaching') throw new Error(`TreatMissingData ${String(props.TreatMissingData)} not evaluated here`);
  const { values, periodSeconds } = alarmSeries(props, points);
  const n = props.EvaluationPeriods as number;
  const m = (props.DatapointsToAlarm as number | undefined) ?? n;
  const compare = COMPARE[props.ComparisonOperator as string]!;
  const step = periodSeconds * 1000;
  for (const end of values.keys()) {
    let breaching = 0;
    for (let i = 0; i < n; i++) {
      const v = values.get(end - i * step);
      if (v !== undefined && compare(v, props.Threshold as number)) breaching++;
    }
    if (breaching >= m) return true;
  }
  return false;
}
