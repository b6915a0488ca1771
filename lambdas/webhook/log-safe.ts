/**
 * Text that came from a request (header values, payload fields) is reduced to a short run
 * of harmless characters before it is logged, so a delivery cannot forge log lines, smuggle
 * control characters or flood the log.
 */
export function logSafe(value: unknown, max = 80): string {
  const text = typeof value === 'string' ? value : typeof value === 'number' || typeof value === 'boolean' ? String(value) : typeof value;
  const cleaned = text.replace(/[^A-Za-z0-9._:/@+=-]/g, '?');
  return cleaned.length > max ? `${cleaned.slice(0, max)}...` : cleaned;
}

export function logSafeList(values: readonly unknown[], maxItems = 16): string[] {
  return values.slice(0, maxItems).map((v) => logSafe(v, 64));
}
