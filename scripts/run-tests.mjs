#!/usr/bin/env node
// `npm test`: type check, lint, the jsii build, the vitest suites, then the bats suites of the
// boot script, and one closing line "N passed, N failed" over all of them, so CI reads one total.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..');
const reports = join(root, '.tmp', 'test-reports');
rmSync(reports, { recursive: true, force: true });
mkdirSync(reports, { recursive: true });

// Stack frames outside the project's code say nothing a reader can act on.
const firstLines = (text, n = 12) =>
  text
    .split('\n')
    .filter((l) => !/^\s+at /.test(l) || (!l.includes('node_modules') && !l.includes('(<anonymous>)') && !l.includes('node:')))
    .slice(0, n)
    .map((l) => `    ${l}`)
    .join('\n');

const run = (label, cmd, args) => {
  console.log(`\n== ${label}: ${[cmd, ...args].join(' ')}`);
  const result = spawnSync(cmd, args, { cwd: root, stdio: 'inherit' });
  return result.status === 0;
};

// The build is the check that the public API compiles for every CDK language: `npm run build`
// runs jsii with --fail-on-warnings, and the summary line must read zero errors and zero
// warnings, so a build that stops printing it fails here instead of passing unread. The
// package tests (test/package) pack and translate what this step built.
// FleetMetricsConfig.namespace (a C# keyword, and the JSON key the Lambdas read).
const JSII_SILENCED = 1;
const jsiiBuild = () => {
  console.log('\n== jsii: npm run build');
  const result = spawnSync('npm', ['run', 'build'], { cwd: root, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  process.stdout.write(result.stdout ?? '');
  process.stderr.write(result.stderr ?? '');
  const summary = /Errors: (\d+) \| Warnings: (\d+)(?: \(\+(\d+) silenced\))?/.exec(`${result.stdout}\n${result.stderr}`);
  if (result.status !== 0) return false;
  if (!summary || summary[1] !== '0' || summary[2] !== '0') {
    console.log(`jsii: expected "Errors: 0 | Warnings: 0", got ${summary ? `"${summary[0]}"` : 'no summary line'}`);
    return false;
  }
  // A new `@jsii suppress` would hide a warning from the check above: each one is reviewed
  // and counted here (docs/languages.md names them).
  const silenced = Number(summary[3] ?? 0);
  if (silenced !== JSII_SILENCED) {
    console.log(`jsii: expected ${JSII_SILENCED} silenced warning(s), got ${silenced}: justify a new @jsii suppress in docs/languages.md and count it in JSII_SILENCED`);
    return false;
  }
  return true;
};

let passed = 0;
let failed = 0;
// Each failure's name and first message lines, repeated after bats: a CI log read from its end
// shows them beside the total.
const failures = [];
let ok = run('typecheck', 'npx', ['tsc', '--noEmit']) && run('lint', 'npx', ['eslint', '.']) && jsiiBuild();
if (ok) {
  const vitestReport = join(reports, 'vitest.json');
  ok = run('vitest', 'npx', ['vitest', 'run', '--reporter=default', '--reporter=json', `--outputFile.json=${vitestReport}`]) && ok;
  if (existsSync(vitestReport)) {
    const report = JSON.parse(readFileSync(vitestReport, 'utf8'));
    passed += report.numPassedTests;
    failed += report.numFailedTests;
    for (const file of report.testResults ?? []) {
      const name = file.name.startsWith(root) ? file.name.slice(root.length + 1) : file.name;
      const failedTests = (file.assertionResults ?? []).filter((t) => t.status === 'failed');
      for (const t of failedTests) failures.push(`vitest ${name} > ${t.fullName}\n${firstLines(t.failureMessages?.join('\n') ?? '')}`);
      // A file that failed outside its tests (an import, a hook) has no failed test to name.
      if (file.status === 'failed' && failedTests.length === 0) failures.push(`vitest ${name}\n${firstLines(file.message ?? '')}`);
    }
  }
  const suites = join(root, 'test', 'templates');
  if (existsSync(suites)) {
    // The bats files side by side, one per core (each file has its own sandbox, ports and temp
    // root; the reuse suites their own users; a file's tests share its sandbox and stay in
    // order): the 166 tests took about 4.5 minutes in a fresh-clone run on 2 cores (2026-12-07),
    // about 14 one file at a time. bats needs GNU parallel for it (.ci/run installs it).
    const gnuParallel = /GNU parallel/.test(spawnSync('parallel', ['--version'], { encoding: 'utf8' }).stdout ?? '');
    if (!gnuParallel) console.log('\nbats: GNU parallel is missing (Debian: parallel; .ci/run installs it): the suites run one at a time');
    const jobs = gnuParallel ? ['--jobs', String(Math.max(2, availableParallelism())), '--no-parallelize-within-files'] : [];
    ok = run('bats', join(root, 'node_modules', 'bats', 'bin', 'bats'), [...jobs, '--report-formatter', 'tap', '--output', reports, suites]) && ok;
    const tap = join(reports, 'report.tap');
    if (existsSync(tap)) {
      const lines = readFileSync(tap, 'utf8').split('\n');
      for (const [n, line] of lines.entries()) {
        if (/^ok \d+/.test(line)) passed++;
        else if (/^not ok \d+/.test(line)) {
          failed++;
          // Its diagnostics: the `# ` lines bats writes after it.
          const diagnostics = [];
          for (let k = n + 1; k < lines.length && lines[k].startsWith('#'); k++) diagnostics.push(lines[k]);
          failures.push(`bats ${line}\n${firstLines(diagnostics.join('\n'))}`);
        }
      }
    }
  }
}
if (!ok && failed === 0) failed = 1; // a type, lint, jsii or runner failure counts as one
if (failures.length > 0) console.log(`\n== failed\n${failures.join('\n\n')}`);
console.log(`\n${passed} passed, ${failed} failed`);
process.exit(ok ? 0 : 1);
