/**
 * The lifetime of a helper process that a harness starts in the background (the boot
 * sandbox, the release server): it serves until SIGTERM or SIGINT, or until its parent is
 * gone, and then runs `stop` once. A harness that dies without stopping it (a killed bats
 * run, a crashed test) must not leave a server, and moto behind it, running.
 */
export function untilStopped(stop: () => Promise<void> | void): void {
  let stopping = false;
  const end = (): void => {
    if (stopping) return;
    stopping = true;
    void Promise.resolve()
      .then(stop)
      .finally(() => process.exit(0));
  };
  process.on('SIGTERM', end);
  process.on('SIGINT', end);
  // Orphaned: the parent exited and this process was re-parented.
  const parent = process.ppid;
  setInterval(() => {
    if (process.ppid !== parent) end();
  }, 1000).unref();
}
