import type { HttpAnswer } from './http';

/**
 * The documented bounds of a list endpoint's query parameters, and what the service does with a
 * value outside them: the loopback servers (here and the provider tests' own) check every
 * request against their provider's table (gitlab-bounds.ts, github-bounds.ts) before routing
 * it, so a request the real service refuses is refused here too and fails a test. A value the
 * service quietly corrects (a `per_page` above the maximum of most lists) is corrected the
 * same way, so a test sees the page size the service would serve.
 */
export type QueryBound =
  /**
   * `per_page`: `max` per page; above it `clamp` (served as `max`) or `refuse`. `zero` is what
   * 0 gets and `negative` what a value below 0 gets: refused, or the `fallback` page size.
   */
  | { readonly kind: 'per-page'; readonly fallback: number; readonly max: number; readonly above: 'clamp' | 'refuse'; readonly zero: 'refuse' | 'fallback'; readonly negative: 'refuse' | 'fallback' }
  /** `page`: an integer; below 1 is the first page (neither service refuses it on these lists). */
  | { readonly kind: 'page' }
  /**
   * One of `values`. `list`: the parameter may repeat (`scope[]=a&scope[]=b`, or `scope=a`),
   * and `commaSeparated` values split on commas (GitLab's `CommaSeparatedToArray`).
   */
  | { readonly kind: 'enum'; readonly values: readonly string[]; readonly list?: boolean; readonly commaSeparated?: boolean }
  /** A boolean in the spellings the service accepts. */
  | { readonly kind: 'boolean'; readonly spellings: readonly string[] }
  /** A string that must match `pattern` (Grape's `regexp:`), else "is invalid". */
  | { readonly kind: 'pattern'; readonly pattern: RegExp }
  /** Free text the service takes as it is (documented, never refused): listed so that the table names every parameter. */
  | { readonly kind: 'text' };

/** One endpoint's query parameters that have documented bounds, with where they are documented. */
export interface EndpointBounds {
  readonly method: 'GET' | 'POST' | 'PUT' | 'DELETE';
  /** Matched against the path below the API's root (GitLab: below `/api/v4`). */
  readonly path: RegExp;
  readonly query: Readonly<Record<string, QueryBound>>;
  /** The published description the bounds come from. */
  readonly source: string;
}

/** Why a value is refused, in the words the service's validation uses (see `refuse`). */
export type Violation = 'invalid' | 'not-allowed' | 'out-of-values';

/** How a provider words a refusal: its status and body for the parameter and violation. */
export type Refuse = (param: string, violation: Violation) => HttpAnswer;

export interface PageWindow {
  readonly page: number;
  readonly perPage: number;
}

/**
 * The request checked against `table`: the refusal the service would answer, or the page it
 * would serve (`page`, `per_page` after the service's corrections: the bound's `fallback` when
 * the request names none, `defaultPerPage` on an endpoint without a `per_page` bound). An
 * endpoint outside the table is served.
 */
export function checkQuery(table: readonly EndpointBounds[], refuse: Refuse, method: string, path: string, query: URLSearchParams, defaultPerPage: number): { refusal: HttpAnswer } | PageWindow {
  const endpoint = table.find((e) => e.method === method.toUpperCase() && matches(e.path, path));
  let page = 1;
  let perPage = defaultPerPage;
  for (const [name, bound] of Object.entries(endpoint?.query ?? {})) {
    const values = valuesOf(query, name, bound);
    if (values.length === 0) {
      if (bound.kind === 'per-page') perPage = bound.fallback;
      continue;
    }
    for (const value of values) {
      const checked = checkValue(bound, value);
      if (typeof checked === 'string') return { refusal: refuse(name, checked) };
      if (bound.kind === 'per-page') perPage = checked;
      if (bound.kind === 'page') page = checked;
    }
  }
  return { page, perPage };
}

/** A number when the value stands (page and per_page as served), else the violation. */
function checkValue(bound: QueryBound, value: string): number | Violation {
  switch (bound.kind) {
    case 'per-page': {
      if (!/^-?\d+$/.test(value.trim())) return 'invalid';
      const n = Number(value);
      if (n === 0) return bound.zero === 'refuse' ? (bound.above === 'refuse' ? 'out-of-values' : 'not-allowed') : bound.fallback;
      if (n < 0) return bound.negative === 'refuse' ? 'out-of-values' : bound.fallback;
      if (n > bound.max) return bound.above === 'refuse' ? 'out-of-values' : bound.max;
      return n;
    }
    case 'page': {
      if (!/^-?\d+$/.test(value.trim())) return 'invalid';
      return Math.max(1, Number(value));
    }
    case 'enum':
      return bound.values.includes(value) ? 0 : 'out-of-values';
    case 'boolean':
      return bound.spellings.includes(value.toLowerCase()) ? 0 : 'invalid';
    case 'pattern':
      return matches(bound.pattern, value) ? 0 : 'invalid';
    case 'text':
      return 0;
  }
}

/** Every value the request gives the parameter (a list's repeated and comma-separated ones included). */
function valuesOf(query: URLSearchParams, name: string, bound: QueryBound): string[] {
  const raw = bound.kind === 'enum' && bound.list ? [...query.getAll(`${name}[]`), ...query.getAll(name)] : query.getAll(name);
  return bound.kind === 'enum' && bound.commaSeparated ? raw.flatMap((v) => v.split(',')) : raw;
}

/** A global or sticky RegExp keeps `lastIndex`: each request must match the same way. */
function matches(re: RegExp, path: string): boolean {
  re.lastIndex = 0;
  return re.test(path);
}
