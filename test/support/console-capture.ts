import { vi } from 'vitest';

/**
 * Captures everything the code under test writes through `console` (libraries such as
 * auth-app warn there), so a test can scan it for planted secrets.
 */
export function captureConsole(): string[] {
  const lines: string[] = [];
  for (const method of ['log', 'info', 'warn', 'error', 'debug'] as const) {
    vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
      lines.push(args.map((a) => (typeof a === 'string' ? a : a instanceof Error ? `${a.name}: ${a.message} ${a.stack ?? ''}` : JSON.stringify(a))).join(' '));
    });
  }
  return lines;
}
