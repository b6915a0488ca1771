#!/usr/bin/env node
// Run by `npm ci` (prepare): names the Debian package of any missing system tool the
// tests need, instead of letting a test fail later with "command not found".
import { execFileSync } from 'node:child_process';

const tools = [
  ['bash', 'bash'],
  ['curl', 'curl'],
  ['shellcheck', 'shellcheck'],
  ['systemd-analyze', 'systemd'],
  ['python3', 'python3'],
  ['aws', 'awscli (or pip install awscli)'],
];

const missing = tools.filter(([cmd]) => {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return false;
  } catch {
    return true;
  }
});
// The Python package test builds its wheel with Debian's interpreter and setuptools (no PyPI).
try {
  execFileSync('/usr/bin/python3', ['-c', 'import setuptools, wheel'], { stdio: 'ignore' });
} catch {
  missing.push(['/usr/bin/python3 with setuptools and wheel', 'python3 python3-setuptools python3-wheel']);
}
let motoMissing = false;
try {
  execFileSync('python3', ['-c', 'import moto.server'], { stdio: 'ignore' });
} catch {
  motoMissing = true;
}
for (const [cmd, pkg] of missing) console.warn(`cdk-warm-runners: "${cmd}" not found; the tests need it: apt-get install ${pkg}`);
if (motoMissing) console.warn('cdk-warm-runners: python3 module "moto" not found; the tests need it: pip install "moto[server]"');
// A warning, not a failure: building the library needs none of these, only its tests do.
