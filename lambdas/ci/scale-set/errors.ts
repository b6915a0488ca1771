/**
 * A scale-set call GitHub refused, or whose answer was lost (`status` 0: no answer, a reset
 * or a timeout). The message names the operation and the status, never a token.
 */
export class ScaleSetApiError extends Error {
  constructor(
    readonly operation: string,
    readonly status: number,
    detail: string,
  ) {
    super(`scale set ${operation} failed: ${status === 0 ? detail : `HTTP ${status}${detail ? ` (${detail})` : ''}`}`);
    this.name = 'ScaleSetApiError';
  }

  /** Whether GitHub may have done what was asked (no answer, or a server error): observe state before acting again. */
  get lost(): boolean {
    return this.status === 0 || this.status >= 500;
  }
}

/** The answer's error text, short: the Actions service answers `{typeName, message}`, GitHub `{message}`. */
export function errorDetail(text: string): string {
  try {
    const doc = JSON.parse(text.replace(/^\uFEFF/, '')) as { typeName?: unknown; message?: unknown };
    const parts = [doc.typeName, doc.message].filter((p): p is string => typeof p === 'string' && p !== '');
    if (parts.length > 0) return parts.join(': ').slice(0, 300);
  } catch {
    // not JSON: the text itself
  }
  return text.slice(0, 300);
}
