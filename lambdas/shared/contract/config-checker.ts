/**
 * The checks the FleetConfig validation is written in. A problem keeps the field's path in
 * the FleetConfig (dotted, "pools.0.labels.1") apart from why it is wrong, so the construct
 * can name the prop the user wrote instead (lib/prop-paths.ts) and the Lambdas the field they
 * read (`pools[0].labels[1]`). Bounds are said in words: no `9007199254740991` for "no limit",
 * durations as durations.
 */

/** One thing wrong with a FleetConfig: where (dotted path) and why (a sentence after the path). */
export interface ConfigProblem {
  readonly path: string;
  readonly why: string;
}

/** A FleetConfig that does not validate; `problems` lists each field. */
export class FleetConfigError extends Error {
  constructor(readonly problems: readonly ConfigProblem[]) {
    super(`invalid fleet config: ${problems.map((p) => `${displayPath(p.path)} ${p.why}`).join('; ')}`);
    this.name = 'FleetConfigError';
  }
}

/** "pools.0.warm.schedule.1.size" as a reader writes it: "pools[0].warm.schedule[1].size". */
export function displayPath(path: string): string {
  return path.replace(/\.(\d+)(?=\.|$)/g, '[$1]');
}

const UNITS = [
  [86_400, 'day'],
  [3600, 'hour'],
  [60, 'minute'],
  [1, 'second'],
] as const;

/** Whole seconds in the largest unit that divides them: 90 → "90 seconds", 7200 → "2 hours". */
export function secondsInWords(seconds: number): string {
  const [size, unit] = UNITS.find(([s]) => seconds % s === 0 && Math.abs(seconds) >= s) ?? [1, 'second'];
  const n = seconds / size;
  return `${n} ${unit}${n === 1 ? '' : 's'}`;
}

function shown(v: unknown): string {
  return v === undefined ? 'nothing' : JSON.stringify(v);
}

export class Checker {
  readonly problems: ConfigProblem[] = [];
  constructor(private readonly root: unknown) {}
  at(path: string): unknown {
    let value: unknown = this.root;
    for (const part of path.split('.')) {
      if (typeof value !== 'object' || value === null) return undefined;
      value = (value as Record<string, unknown>)[part];
    }
    return value;
  }
  fail(path: string, why: string): void {
    this.problems.push({ path, why });
  }
  string(path: string): string | undefined {
    const v = this.at(path);
    if (typeof v !== 'string' || v === '') {
      this.fail(path, `must be a non-empty string, got ${shown(v)}`);
      return undefined;
    }
    return v;
  }
  /** A whole number from `min` to `max` (no upper bound when `max` is absent). */
  integer(path: string, min: number, max?: number): number | undefined {
    const v = this.at(path);
    if (!Number.isSafeInteger(v) || (v as number) < min || (max !== undefined && (v as number) > max)) {
      this.fail(path, `must be a whole number ${max === undefined ? `of at least ${min}` : `from ${min} to ${max}`}, got ${shown(v)}`);
      return undefined;
    }
    return v as number;
  }
  /** A duration in whole seconds, its bounds said as durations. */
  seconds(path: string, min: number, max?: number): number | undefined {
    const v = this.at(path);
    if (!Number.isSafeInteger(v) || (v as number) < min || (max !== undefined && (v as number) > max)) {
      const bound = max === undefined ? `at least ${secondsInWords(min)}` : `from ${secondsInWords(min)} to ${secondsInWords(max)}`;
      this.fail(path, `must be ${bound}, got ${Number.isSafeInteger(v) ? secondsInWords(v as number) : shown(v)}`);
      return undefined;
    }
    return v as number;
  }
  boolean(path: string): void {
    if (typeof this.at(path) !== 'boolean') this.fail(path, `must be true or false, got ${shown(this.at(path))}`);
  }
  /** A list of non-empty strings, at least `minLength` of them; each bad entry is named by its index. */
  strings(path: string, minLength: 0 | 1): string[] {
    const v = this.at(path);
    if (!Array.isArray(v)) {
      this.fail(path, `must be a list of non-empty strings, got ${shown(v)}`);
      return [];
    }
    if (v.length < minLength) {
      this.fail(path, 'is empty; list at least one');
      return [];
    }
    const bad = v.findIndex((s) => typeof s !== 'string' || s === '');
    if (bad >= 0) {
      this.fail(`${path}.${bad}`, `must be a non-empty string, got ${shown(v[bad])}`);
      return [];
    }
    return v as string[];
  }
}
