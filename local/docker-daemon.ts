/**
 * A Docker daemon of the run's own (`npm run local -- --docker`), never this host's: its own
 * data and exec roots and socket under a directory of the sandbox, the vfs storage driver, no
 * default bridge and no iptables rules, in a network namespace of its own (`unshare --net`):
 * the jobs' networks, their bridges and their traffic live there, away from this host's
 * interfaces and firewall (a host whose FORWARD policy is DROP, with bridge netfilter on, drops
 * bridged traffic of a daemon in its own namespace), and go with the daemon. No image registry is reachable: the job image is `docker import` of a root
 * file system holding Debian's static busybox (busybox-static), which the run serves from its
 * containers (an httpd service, nc in the job: this busybox's wget crashes in a container). test/templates/docker-daemon.bash is the bats
 * harness's twin. Needs root (dockerd).
 */
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The image every container job of the run uses (job and services). */
export const LOCAL_DOCKER_IMAGE = 'cwr-busybox:local';
/** What the image's /etc/cwr-image holds: a job proves it ran in that image by reading it. */
export const LOCAL_DOCKER_IMAGE_MARK = 'cwr-busybox-local';
const BUSYBOX = '/bin/busybox';
const APPLETS = ['sh', 'sleep', 'echo', 'cat', 'ls', 'nc', 'httpd', 'tail', 'hostname', 'mkdir', 'test', '[', 'grep', 'printf'];

export interface LocalDockerDaemon {
  /** `unix://<socket>`: DOCKER_HOST for the CLI. */
  readonly host: string;
  /** The real docker CLI against it. */
  docker(args: readonly string[]): string;
  /** Its containers, networks it did not make itself, and volumes (what a run must not leave). */
  leftovers(): { containers: string[]; networks: string[]; volumes: string[] };
  stop(): Promise<void>;
}

/** Why this host cannot run the daemon, or undefined when it can. */
export function dockerUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'dockerd runs as root';
  for (const bin of ['/usr/sbin/dockerd', '/usr/bin/docker']) if (!existsSync(bin)) return `${bin} is missing (apt-get install docker.io)`;
  if (!existsSync(BUSYBOX)) return `${BUSYBOX} is missing (apt-get install busybox-static)`;
  try {
    execFileSync('ldd', [BUSYBOX], { stdio: 'ignore' });
    return `${BUSYBOX} is not static (apt-get install busybox-static)`;
  } catch {
    return undefined; // "not a dynamic executable"
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Starts it in `dir` (created), waits until it answers (within `boundMs`), imports the image. */
export async function startLocalDockerDaemon(dir: string, boundMs: number): Promise<LocalDockerDaemon> {
  mkdirSync(join(dir, 'data'), { recursive: true });
  mkdirSync(join(dir, 'exec'), { recursive: true });
  chmodSync(dir, 0o755);
  const socket = join(dir, 'd.sock');
  const host = `unix://${socket}`;
  const pidFile = join(dir, 'd.pid');
  const child = spawn(
    'unshare',
    ['--net', '--', '/usr/sbin/dockerd', '--storage-driver', 'vfs', '--data-root', join(dir, 'data'), '--exec-root', join(dir, 'exec'), '--host', host, '--pidfile', pidFile, '--bridge', 'none', '--iptables=false', '--ip-masq=false'],
    { stdio: ['ignore', 'ignore', 'ignore'], detached: true },
  );
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // An abrupt exit (a second Ctrl-C) runs no cleanup: the daemon must not outlive the run.
  const killNow = (): void => {
    child.kill('SIGKILL');
  };
  process.on('exit', killNow);
  const docker = (args: readonly string[]): string => execFileSync('/usr/bin/docker', [...args], { env: { ...process.env, DOCKER_HOST: host }, encoding: 'utf8', timeout: 60_000 }).trim();
  const lines = (out: string): string[] => out.split('\n').filter(Boolean);
  const stop = async (): Promise<void> => {
    process.off('exit', killNow);
    if (child.exitCode === null && child.signalCode === null) {
      // Its networks' bridges live in this host's namespace: removed while it still runs.
      try {
        const all = lines(docker(['ps', '-aq']));
        if (all.length) docker(['rm', '-f', ...all]);
        docker(['network', 'prune', '-f']);
      } catch {
        // a daemon that does not answer: stopped all the same
      }
      child.kill('SIGTERM');
      const done = await Promise.race([exited.then(() => true), sleep(30_000).then(() => false)]);
      if (!done) child.kill('SIGKILL');
      await exited;
    }
    // Mounts it left (a killed daemon's), deepest first, then its directory.
    const mounts = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .map((l) => l.split(' ')[1] ?? '')
      .filter((m) => m.startsWith(`${dir}/`))
      .sort()
      .reverse();
    for (const m of mounts) {
      try {
        execFileSync('umount', [m], { stdio: 'ignore' });
      } catch {
        execFileSync('umount', ['-l', m], { stdio: 'ignore' });
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const end = Date.now() + boundMs; ; ) {
      try {
        docker(['version']);
        break;
      } catch {
        if (child.exitCode !== null || Date.now() > end) throw new Error(`the run's dockerd did not answer within ${Math.round(boundMs / 1000)} s`);
        await sleep(200);
      }
    }
    // Open to every user: the played machines' runner users use it without this host's docker group.
    chmodSync(socket, 0o666);
    const root = mkdtempSync(join(dir, 'rootfs-'));
    for (const sub of ['bin', 'etc', 'tmp', 'www']) mkdirSync(join(root, sub));
    copyFileSync(BUSYBOX, join(root, 'bin', 'busybox'));
    chmodSync(join(root, 'bin', 'busybox'), 0o755);
    for (const applet of APPLETS) symlinkSync('busybox', join(root, 'bin', applet));
    writeFileSync(join(root, 'etc', 'cwr-image'), `${LOCAL_DOCKER_IMAGE_MARK}\n`);
    writeFileSync(join(root, 'www', 'index.html'), 'service-ok\n');
    // Its command is the service's (a GitHub service container runs its image's own command): httpd on 8080.
    execFileSync('bash', ['-c', `tar -C "$1" -c . | /usr/bin/docker import --change 'CMD ["httpd", "-f", "-p", "8080", "-h", "/www"]' - "$2"`, 'import', root, LOCAL_DOCKER_IMAGE], { env: { ...process.env, DOCKER_HOST: host }, stdio: 'ignore', timeout: 120_000 });
    rmSync(root, { recursive: true, force: true });
  } catch (error) {
    await stop();
    throw error;
  }
  return {
    host,
    docker,
    leftovers: () => ({
      containers: lines(docker(['ps', '-aq'])),
      networks: lines(docker(['network', 'ls', '-q', '--filter', 'type=custom'])),
      volumes: lines(docker(['volume', 'ls', '-q'])),
    }),
    stop,
  };
}
