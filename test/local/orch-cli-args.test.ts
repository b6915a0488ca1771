import { afterEach, describe, expect, it, vi } from 'vitest';
import { parseLocalArgs, UsageError } from '../../local/cli-args';

describe('npm run local: the command line', () => {
  it.each<[string[], Record<string, unknown>]>([
    [[], { help: false, json: false, verbose: false, burst: false, drift: false }],
    [['--jobs', '0'], { jobs: 0 }],
    [['--jobs', '50', '--pool-size', '20'], { jobs: 50, poolSize: 20 }],
    [['--jobs=7'], { jobs: 7 }],
    [['--pool-size', '0', '--burst'], { poolSize: 0, burst: true }],
    [['--pool-size', '0', '--jobs', '0'], { poolSize: 0, jobs: 0 }],
    [['--deadline', '10'], { deadlineMs: 10_000 }],
    [['--endpoint', 'http://127.0.0.1:5000', '--json', '--verbose'], { endpoint: 'http://127.0.0.1:5000', json: true, verbose: true }],
    [['--faults', '--drift'], { faults: { refuseStart: true, stallPriming: true, badSignature: true, duplicate: true, ciError: true }, drift: true }],
    [['--faults', 'tampered-download', '--jobs', '1'], { faults: { tamperedDownload: true }, jobs: 1 }],
    [['--faults=tampered-download'], { faults: { tamperedDownload: true } }],
    [['--faults', '--image', 'stock'], { faults: { refuseStart: true, stallPriming: true, badSignature: true, duplicate: true, ciError: true }, image: 'stock' }],
    [['--image', 'prebuilt', '--faults'], { image: 'prebuilt', faults: { ciError: true } }],
    [['--faults', '--seed', '7', '--jobs', '3'], { faults: { lossy: true, duplicate: true }, seed: 7, jobs: 3 }],
    [['--faults', '--seed=0'], { faults: { lossy: true }, seed: 0 }],
    [['-h'], { help: true }],
    [['--reuse'], { reuse: true, burst: false }],
    [['--apt-pool', 'linux-x64'], { aptPools: ['linux-x64'] }],
    [['--apt-pool', 'linux-x64', '--apt-pool', 'gitlab-docker', '--apt-pool', 'linux-x64'], { aptPools: ['linux-x64', 'gitlab-docker'] }],
    [['--reuse', '--pool-size', '4', '--image', 'prebuilt'], { reuse: true, poolSize: 4, image: 'prebuilt' }],
    [['--apps', '2'], { apps: 2 }],
    [['--scopes', '--jobs', '2', '--burst'], { scopes: true, jobs: 2, burst: true }],
    [['--scopes', '--apps', '3'], { scopes: true, apps: 3 }],
    [['--scale-set'], { scaleSet: true, jobs: 3, poolSize: 1 }],
    [['--scale-set', '--seed', '4', '--jobs', '2', '--pool-size', '0'], { scaleSet: true, seed: 4, jobs: 2, poolSize: 0 }],
  ])('accepts %j (as root)', (argv, expected) => {
    expect(parseLocalArgs(argv, true)).toMatchObject(expected);
  });

  it.each<[string[], string]>([
    [['--jobs', 'many'], '--jobs must be a whole number from 0 to 50, got "many"'],
    [['--apt-pool', 'linux-x64', '--image', 'prebuilt'], '--apt-pool needs the stock image (a prebuilt image installs nothing): leave out --image prebuilt'],
    [['--apt-pool', 'Linux X64'], '--apt-pool takes a pool name of the example (linux-x64, gitlab-docker), got "Linux X64"'],
    [['--reuse', '--jobs', '2'], '--reuse sends its own two waves of one job per repository and project: leave out --jobs'],
    [['--reuse', '--burst'], '--reuse sends its own two waves of one job per repository and project: leave out --burst'],
    [['--reuse', '--faults'], '--reuse sends its own two waves of one job per repository and project: leave out --faults'],
    [['--reuse', '--drift'], '--reuse sends its own two waves of one job per repository and project: leave out --drift'],
    [['--scopes', '--faults'], '--scopes alternates the jobs between two organisations and two groups: leave out --faults'],
    [['--scopes', '--reuse'], '--scopes alternates the jobs between two organisations and two groups: leave out --reuse'],
    [['--reuse', '--pool-size', '0'], '--reuse needs parked instances to reuse: leave out --pool-size 0'],
    [['--jobs', '1e3'], '--jobs must be a whole number from 0 to 50, got "1e3"'],
    [['--jobs', '0x10'], '--jobs must be a whole number from 0 to 50, got "0x10"'],
    [['--jobs', '2.5'], '--jobs must be a whole number from 0 to 50, got "2.5"'],
    [['--jobs', ' 5'], '--jobs must be a whole number from 0 to 50, got " 5"'],
    [['--jobs', ''], '--jobs must be a whole number from 0 to 50, got ""'],
    [['--jobs', '-1'], '--jobs must be a whole number from 0 to 50, got "-1"'],
    [['--jobs=-1'], '--jobs must be a whole number from 0 to 50, got "-1"'],
    [['--jobs', '51'], '--jobs must be a whole number from 0 to 50, got "51"'],
    [['--pool-size', '21'], '--pool-size must be a whole number from 0 to 20, got "21"'],
    [['--pool-size', '-3', '--burst'], '--pool-size must be a whole number from 0 to 20, got "-3"'],
    [['--deadline', '9'], '--deadline must be a whole number from 10 to 3600, got "9"'],
    [['--pool-size', '0'], '--pool-size 0 parks no instance, so the default run (jobs in waves the parked instances serve warm) could never send a job: add --burst to launch every job cold'],
    [['--pool-size', '0', '--jobs', '3', '--faults'], '--pool-size 0 parks no instance'],
    [['--endpoint', 'localhost:5000'], '--endpoint must be an http(s) URL, got "localhost:5000"'],
    [['--faults=everything'], '--faults takes no value or one of tampered-download, got "everything"'],
    [['--faults', 'tampered'], "Unexpected argument 'tampered'"],
    [['--image', 'baked'], '--image must be one of stock, prebuilt, got "baked"'],
    [['--faults', 'tampered-download', '--image', 'prebuilt'], '--faults tampered-download needs the stock image'],
    [['--faults', 'tampered-download', '--pool-size', '0', '--burst'], '--faults tampered-download with --pool-size 0 launches no standby'],
    [['--seed', '3'], "--seed plans the lost-job faults (add --faults) or the scale set's (add --scale-set)"],
    [['--faults', 'tampered-download', '--seed', '3'], '--seed plans the lost-job faults (add --faults)'],
    [['--scale-set', '--faults'], '--scale-set runs its own two waves and faults on the two GitHub pools: leave out --faults'],
    [['--scale-set', '--scopes'], 'leave out --scopes'],
    [['--scale-set', '--burst'], 'leave out --burst'],
    [['--faults', '--seed', '-1'], '--seed must be a whole number from 0 to 2147483647, got "-1"'],
    [['--apps', '0'], '--apps must be a whole number from 1 to 5, got "0"'],
    [['--apps', '6'], '--apps must be a whole number from 1 to 5, got "6"'],
    [['--faults', '--jobs', '2'], '--faults needs --jobs 3 or more (the lost-job faults need that many jobs per provider), got 2'],
    [['--job', '3'], "Unknown option '--job'"],
    [['extra'], "Unexpected argument 'extra'"],
    [['--jobs'], "Option '--jobs <value>' argument missing"],
  ])('refuses %j (as root)', (argv, message) => {
    expect(() => parseLocalArgs(argv, true)).toThrow(UsageError);
    expect(() => parseLocalArgs(argv, true)).toThrow(message);
  });

  describe('--reuse needs root', () => {
    afterEach(() => vi.restoreAllMocks());
    const why = '--reuse needs root: each played machine needs a runner user of its own (useradd), since the cleaning after a job ends every process of that user; run it as root';

    it.each([[['--reuse']], [['--reuse', '--pool-size', '4', '--json']]])('refuses %j when not root, saying why', (argv) => {
      expect(() => parseLocalArgs(argv, false)).toThrow(UsageError);
      expect(() => parseLocalArgs(argv, false)).toThrow(why);
    });

    it("takes root from the process's uid by default", () => {
      const getuid = vi.spyOn(process, 'getuid').mockReturnValue(1000);
      expect(() => parseLocalArgs(['--reuse'])).toThrow(why);
      getuid.mockReturnValue(0);
      expect(parseLocalArgs(['--reuse'])).toMatchObject({ reuse: true });
    });

    it("refuses --apt-pool when not root: its machines run this host's real apt-get", () => {
      expect(() => parseLocalArgs(['--apt-pool', 'linux-x64'], false)).toThrow("--apt-pool needs root: the apt pool's machines run this host's real apt-get; run it as root");
    });

    it('a run without --reuse needs no root', () => {
      expect(parseLocalArgs([], false)).toMatchObject({ burst: false });
      expect(parseLocalArgs(['--faults', '--image', 'stock'], false)).toMatchObject({ image: 'stock' });
    });
  });
});

describe('npm run local -- --docker: the command line', () => {
  const ready = (): undefined => undefined;
  it('accepts --docker with the other run shapes, as root on a host with dockerd and busybox-static', () => {
    expect(parseLocalArgs(['--docker'], true, ready)).toMatchObject({ docker: true });
    expect(parseLocalArgs(['--docker', '--jobs', '2', '--burst', '--image', 'prebuilt'], true, ready)).toMatchObject({ docker: true, jobs: 2, burst: true, image: 'prebuilt' });
    expect(parseLocalArgs([], true, () => 'never asked')).not.toHaveProperty('docker');
  });
  it.each<[string[], boolean, string]>([
    [['--docker', '--reuse'], true, "--docker runs container jobs on the example's pools: leave out --reuse"],
    [['--docker', '--faults'], true, "--docker runs container jobs on the example's pools: leave out --faults"],
    [['--docker'], false, '--docker needs root: the run starts a Docker daemon of its own (dockerd)'],
  ])('refuses %j (root: %s)', (argv, root, message) => {
    expect(() => parseLocalArgs(argv, root, (r) => (r ? undefined : 'root: the run starts a Docker daemon of its own (dockerd)'))).toThrow(new UsageError(message));
  });
  it('names what the host lacks', () => {
    expect(() => parseLocalArgs(['--docker'], true, () => '/bin/busybox is missing (apt-get install busybox-static)')).toThrow('--docker needs /bin/busybox is missing (apt-get install busybox-static)');
  });
});
