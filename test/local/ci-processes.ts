import { readdirSync, readFileSync } from 'node:fs';

/** Waits until `ready` holds: a state the test reaches through real processes, not a duration. */
export async function until(ready: () => boolean): Promise<void> {
  while (!ready()) await new Promise((r) => setTimeout(r, 50));
}

/**
 * The processes of a process group still running. Zombies do not count: a subshell's, left
 * when bash exits, waits for PID 1 to reap it and runs nothing.
 */
export function runningInGroup(pgid: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] !== 'Z' && Number(fields[2]) === pgid) pids.push(Number(entry));
  }
  return pids;
}
