import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertBuilt, consumerEnv, packageJson, ROOT, run } from './built-package';

// The second CDK language as far as this machine goes: jsii-pacmak generates the Python
// package from the assembly, Python byte-compiles every module, and Debian's setuptools
// builds the wheel. Importing it needs the Python `jsii` and `aws-cdk-lib` packages from
// PyPI, which this machine cannot reach (docs/languages.md names that step).

// Debian's interpreter, whose python3-setuptools and python3-wheel build the wheel offline
// (.ci/run installs them when missing); `python3` on PATH may be another one without them.
const PYTHON = '/usr/bin/python3';
// Generating (jsii-pacmak packs the library and translates the docs) on a loaded machine.
const SLOW = 600_000;

const pkg = packageJson();
const jsiiConfig = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { jsii: { targets: { python: { module: string; distName: string } } } }).jsii;
const { module: pythonModule, distName } = jsiiConfig.targets.python;

/**
 * Checks the Python example of docs/languages.md against the generated bindings without
 * running it (that needs PyPI's jsii): it compiles, every name it imports from the module
 * is a class there, every keyword argument it passes to one is a parameter of that class,
 * and every member it reads (an enum member, a static method) is defined on it.
 */
const CHECK_EXAMPLE = `import ast, json, re, sys
bindings = ast.parse(open(sys.argv[1]).read())
fence = chr(96) * 3  # the Markdown code fence
example = re.search(fence + "python\\n(.*?)" + fence, open(sys.argv[2]).read(), re.S).group(1)
module = sys.argv[3]
compile(example, "example.py", "exec")
classes = {}
for node in bindings.body:
    if isinstance(node, ast.ClassDef):
        params, members = set(), set()
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                members.add(item.name)
                if item.name == "__init__":
                    params = {a.arg for a in item.args.args + item.args.kwonlyargs} - {"self"}
            if isinstance(item, ast.Assign):
                members |= {t.id for t in item.targets if isinstance(t, ast.Name)}
        classes[node.name] = (params, members)
tree = ast.parse(example)
imported, problems = set(), []
for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == module:
        for alias in node.names:
            imported.add(alias.name)
            if alias.name not in classes:
                problems.append(f"imports {alias.name}, which the bindings lack")
for node in ast.walk(tree):
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in imported and node.func.id in classes:
        for keyword in node.keywords:
            if keyword.arg not in classes[node.func.id][0]:
                problems.append(f"{node.func.id}({keyword.arg}=...) is not a parameter")
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported and node.value.id in classes:
        if node.attr not in classes[node.value.id][1]:
            problems.append(f"{node.value.id}.{node.attr} is not defined")
print(json.dumps({"imported": sorted(imported), "problems": problems}))
`;

let out: string;
let python: string;
let pyFiles: string[];
let wheelEntries: string[];
let embeddedTarball: string[];
let embeddedScripts: unknown;

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? filesUnder(join(dir, e.name)) : [join(dir, e.name)]));
}

beforeAll(() => {
  assertBuilt();
  if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: apt-get install python3 python3-setuptools python3-wheel`);
  out = mkdtempSync(join(tmpdir(), 'wr-python-'));
  // pacmak packs the library with `npm pack`, scripts on, as a release does: the tarball the
  // wheel embeds is the npm package's (prepack's package.json, no rebuild).
  run(join(ROOT, 'node_modules', '.bin', 'jsii-pacmak'), ['--targets', 'python', '--code-only', '--outdir', out, '--no-npmignore', '--no-fingerprint'], {
    cwd: ROOT,
    env: consumerEnv(),
  });
  python = join(out, 'python');
  pyFiles = filesUnder(python).filter((f) => f.endsWith('.py'));
  run(PYTHON, ['-m', 'py_compile', ...pyFiles], { cwd: python });
  run(PYTHON, ['setup.py', '--quiet', 'bdist_wheel', '--dist-dir', join(out, 'wheel')], { cwd: python });
  const wheels = readdirSync(join(out, 'wheel')).filter((f) => f.endsWith('.whl'));
  if (wheels.length !== 1) throw new Error(`expected one wheel, found ${JSON.stringify(wheels)}`);
  // The wheel's entries, then the entries of the npm tarball it embeds (the code jsii runs).
  const listing = run(
    PYTHON,
    [
      '-c',
      `import io, json, sys, tarfile, zipfile
whl = zipfile.ZipFile(sys.argv[1])
names = whl.namelist()
tgz = [n for n in names if n.endswith('.jsii.tgz')]
tar = tarfile.open(fileobj=io.BytesIO(whl.read(tgz[0]))) if len(tgz) == 1 else None
inner = tar.getnames() if tar else []
manifest = json.load(tar.extractfile('package/package.json')) if tar else {}
print(json.dumps({"wheel": names, "tarball": inner, "scripts": manifest.get("scripts")}))`,
      join(out, 'wheel', wheels[0]!),
    ],
    {},
  );
  ({ wheel: wheelEntries, tarball: embeddedTarball, scripts: embeddedScripts } = JSON.parse(listing.stdout) as { wheel: string[]; tarball: string[]; scripts: unknown });
}, SLOW);

afterAll(() => {
  if (out) rmSync(out, { recursive: true, force: true });
});

describe(`the Python package (${distName})`, () => {
  it('is generated as one module that byte-compiles', () => {
    expect(pyFiles.map((f) => relative(python, f)).sort()).toEqual(expect.arrayContaining([`src/${pythonModule}/__init__.py`, `src/${pythonModule}/_jsii/__init__.py`, 'setup.py']));
  });

  it('exposes the constructs, the enums with their members, and the user data helpers as a class', () => {
    const init = readFileSync(join(python, 'src', pythonModule, '__init__.py'), 'utf8');
    for (const cls of ['WarmRunners', 'RunnerFleet', 'JobQueue', 'RunnerUserData', 'WarmRunnersProps', 'RunnerPoolProps', 'FleetConfig', 'PoolWarmConfig']) {
      expect(init).toMatch(new RegExp(`^class ${cls}\\b`, 'm'));
    }
    expect(init).toMatch(/^class Provider\(enum\.Enum\):[\s\S]*?^ {4}GITHUB = "GITHUB"/m);
    expect(init).toMatch(/^class GitLabRunnerType\(enum\.Enum\):[\s\S]*?^ {4}GROUP = "GROUP"/m);
    expect(init).toMatch(/^class LabelMatch\(enum\.Enum\):[\s\S]*?^ {4}SUBSET = "SUBSET"/m);
    for (const method of ['render', 'render_start_logic', 'encode', 'decode', 'check_size']) expect(init).toMatch(new RegExp(`^ {4}def ${method}\\(`, 'm'));
  });

  it('matches the Python example of docs/languages.md: imports, keyword arguments and enum members exist', () => {
    const init = join(python, 'src', pythonModule, '__init__.py');
    const checked = run(PYTHON, ['-c', CHECK_EXAMPLE, init, join(ROOT, 'docs', 'languages.md'), pythonModule]);
    const { imported, problems } = JSON.parse(checked.stdout) as { imported: string[]; problems: string[] };
    expect(imported).toEqual(expect.arrayContaining(['WarmRunners', 'Provider', 'RunnerPoolProps']));
    expect(problems).toEqual([]);
  });

  it('builds as a wheel that carries the module and the library jsii loads', () => {
    expect(wheelEntries).toEqual(expect.arrayContaining([`${pythonModule}/__init__.py`, `${pythonModule}/_jsii/${pkg.name}@${pkg.version}.jsii.tgz`]));
    // The Python runtime loads the JavaScript package and reads its assembly from it.
    expect(embeddedTarball).toEqual(expect.arrayContaining(['package/.jsii', 'package/dist/lib/index.js', 'package/assets/scale-up/index.js']));
    // The npm package's own package.json (prepack's): no scripts.
    expect(embeddedScripts).toBeNull();
  });
});
