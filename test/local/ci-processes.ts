import { groupPids } from '../../local/instances/machine';

/** Waits until `ready` holds: a state the test reaches through real processes, not a duration. */
export async function until(ready: () => boolean): Promise<void> {
  while (!ready()) await new Promise((r) => setTimeout(r, 50));
}

/**
 * The processes of a process group still running. Zombies do not count: a subshell's, left
 * when bash exits, waits for PID 1 to reap it and runs nothing.
 */
export const runningInGroup = groupPids;
