import { X509Certificate } from 'node:crypto';
import type * as imagebuilder from 'aws-cdk-lib/aws-imagebuilder';
import type * as s3assets from 'aws-cdk-lib/aws-s3-assets';
import { renderInstallScript, shellQuote, type UserDataOptions } from './user-data';

/** Image Builder's limit on an inline component document (CreateComponent `data`: 16,000 characters). */
export const COMPONENT_DATA_MAX = 16_000;

/** Where a step of a RunnerImage runs: the image's install options, for steps that need them. */
export interface RunnerImageStepContext {
  /** The options the image's install step is rendered with (its runner user, directory, package). */
  readonly installOptions: UserDataOptions;
}

/** What a step adds to the recipe: an existing component, or a document the image creates a component for. */
export interface RunnerImageStepComponent {
  /** An existing component's ARN (a team's own, or one of Amazon's). */
  readonly componentArn?: string;
  /** A component document (JSON, which is YAML) for the image to create. */
  readonly document?: string;
  /** Name suffix and description of the created component. */
  readonly name?: string;
  readonly description?: string;
  /** An S3 asset the document downloads: the build instance's role may read it. */
  readonly asset?: s3assets.Asset;
  /**
   * What identifies an existing component's content, for the recipe's version (resolved by the
   * stack): a CfnComponent's ARN is a GetAtt that never changes in the template.
   */
  readonly identity?: unknown;
}

/**
 * A step a RunnerImage runs after the runner's install step, in the order given: an Image
 * Builder component of the team's (its ARN, or a CfnComponent), shell commands, or a built-in
 * step (Docker, extra CA certificates). Each is one component of the image's recipe.
 */
export abstract class RunnerImageStep {
  /** An existing Image Builder component, by ARN (for example `arn:aws:imagebuilder:eu-west-1:aws:component/amazon-cloudwatch-agent-linux/x.x.x`). */
  static component(componentArn: string): RunnerImageStep {
    return new ComponentStep({ componentArn });
  }

  /** An Image Builder component the app defines. */
  static fromCfnComponent(component: imagebuilder.CfnComponent): RunnerImageStep {
    // A new version or document replaces the component (a new ARN): the recipe must change with it.
    const c = component;
    const identity = [c.name, c.version, c.platform, c.data, c.uri, c.supportedOsVersions, c.kmsKeyId];
    return new ComponentStep({ componentArn: component.attrArn, identity });
  }

  /**
   * Shell commands, run as root in order by one ExecuteBash step with `set -euo pipefail`: a
   * failing one fails the build (no image is published).
   * @param name the step's name: letters, digits, "-" and "_"
   */
  static shell(name: string, commands: string[]): RunnerImageStep {
    if (!/^[A-Za-z][A-Za-z0-9_-]{0,63}$/.test(name)) throw new Error(`RunnerImageStep.shell: name "${name}" must be letters, digits, "-" and "_", starting with a letter`);
    if (commands.length === 0) throw new Error(`RunnerImageStep.shell "${name}": commands is empty`);
    return new ScriptStep(name, `Shell step ${name}`, ['set -euo pipefail', ...commands].join('\n'));
  }

  /**
   * Docker as the boot installs it for a pool's `docker` prop (the install script's
   * `install_docker`, one source): the distribution's package (`docker` with dnf on Amazon
   * Linux 2023, `docker.io` with apt-get on Debian and Ubuntu), the runner user in the `docker`
   * group, the daemon enabled and started, and the build waits until it answers: the image's
   * jobs can use Docker without installing it.
   */
  static docker(): RunnerImageStep {
    return new DockerStep();
  }

  /**
   * Extra CA certificates (PEM, one certificate each, such as a TLS-inspecting proxy's or an
   * internal registry's), added to the operating system's trust store: Amazon Linux's
   * /etc/pki/ca-trust/source/anchors with `update-ca-trust`, or Debian's and Ubuntu's
   * /usr/local/share/ca-certificates with `update-ca-certificates`. Each is parsed at synth;
   * what is not a certificate (a private key, a typo) is refused.
   */
  static caCertificates(certificates: string[]): RunnerImageStep {
    if (certificates.length === 0) throw new Error('RunnerImageStep.caCertificates: certificates is empty');
    certificates.forEach((pem, i) => certificateProblem(pem, `certificates[${i}]`));
    // Named by the certificate's SHA-256: another CA step of the image writes other files.
    const files = certificates.map((pem) => `printf '%s\\n' ${shellQuote(pem.trim())} >"$dir/cdk-warm-runners-${certificateName(pem)}.crt"`);
    return new ScriptStep('CaCertificates', `${certificates.length} extra CA certificate(s) in the trust store`, caScript(files));
  }

  /**
   * Extra CA certificates from a PEM file (one or more certificates) uploaded as an S3 asset:
   * for bundles too large for the component document (16,000 characters). The build instance
   * downloads it (its role may read the asset, nothing else of the bucket) and installs each
   * certificate as `caCertificates` does. The file is not parsed at synth.
   */
  static caCertificatesFromAsset(asset: s3assets.Asset): RunnerImageStep {
    return new CaAssetStep(asset);
  }

  /** @internal */
  abstract _bind(context: RunnerImageStepContext): RunnerImageStepComponent;
}

class ComponentStep extends RunnerImageStep {
  constructor(private readonly config: RunnerImageStepComponent) {
    super();
  }
  _bind(): RunnerImageStepComponent {
    return this.config;
  }
}

class ScriptStep extends RunnerImageStep {
  constructor(
    private readonly name: string,
    private readonly description: string,
    private readonly script: string,
  ) {
    super();
  }
  _bind(): RunnerImageStepComponent {
    return { name: this.name, description: this.description, document: componentDocument(this.name, this.description, [bashStep(this.name, this.script)]) };
  }
}

class DockerStep extends RunnerImageStep {
  _bind(context: RunnerImageStepContext): RunnerImageStepComponent {
    const description = 'Docker from the distribution, enabled and started, the runner user in its group';
    // The boot's own install_docker (templates/install-runner.sh, one source): the standalone
    // install script with Docker on; its install_runner finds the runner the install step put there.
    const script = renderInstallScript({ ...context.installOptions, docker: {} });
    return { name: 'Docker', description, document: componentDocument('Docker', description, [bashStep('Docker', script)]) };
  }
}

class CaAssetStep extends RunnerImageStep {
  constructor(private readonly asset: s3assets.Asset) {
    super();
  }
  _bind(): RunnerImageStepComponent {
    const file = '/tmp/cdk-warm-runners-ca-bundle.pem';
    const description = 'Extra CA certificates from an S3 asset in the trust store';
    // One file per certificate (update-ca-certificates links each .crt by its first certificate's
    // hash), named by the asset's hash (another CA step writes other files). Only the
    // CERTIFICATE blocks are copied: a key in the bundle must not land in a world-readable .crt;
    // a block cut short fails.
    const name = `$dir/cdk-warm-runners-${this.asset.assetHash.slice(0, 16)}-`;
    const split = [
      `awk -v f="${name}" '/^-----BEGIN CERTIFICATE-----/{n++; c=1} c{print > (f n ".crt")} c && /^-----END CERTIFICATE-----/{close(f n ".crt"); c=0} END{exit (!n || c)}' ${file}`,
      `|| { echo "${file} holds no certificate, or one cut short" >&2; exit 1; }`,
    ].join(' ');
    const steps = [
      { name: 'DownloadCaBundle', action: 'S3Download', onFailure: 'Abort', inputs: [{ source: this.asset.s3ObjectUrl, destination: file }] },
      bashStep('CaCertificatesFromAsset', caScript([split, `rm -f ${file}`])),
    ];
    return { name: 'CaCertificatesFromAsset', description, document: componentDocument('CaCertificatesFromAsset', description, steps), asset: this.asset };
  }
}

/** The trust store of the distribution, the lines that write the certificates into `$dir`, then its update. */
function caScript(write: string[]): string {
  return [
    'set -euo pipefail',
    'if command -v update-ca-trust >/dev/null 2>&1; then dir=/etc/pki/ca-trust/source/anchors update=(update-ca-trust extract)',
    'elif command -v update-ca-certificates >/dev/null 2>&1; then dir=/usr/local/share/ca-certificates update=(update-ca-certificates)',
    'else echo "neither update-ca-trust nor update-ca-certificates: cannot add CA certificates" >&2; exit 1; fi',
    'mkdir -p "$dir"',
    ...write,
    '"${update[@]}"',
  ].join('\n');
}

function bashStep(name: string, script: string): object {
  if (script.includes('{{')) throw new Error(`RunnerImage step ${name} holds "{{", which Image Builder would read as a variable`);
  return { name, action: 'ExecuteBash', onFailure: 'Abort', inputs: { commands: [script] } };
}

/** A component document with one build phase (the schema version is the number 1.0, as in Image Builder's examples). */
export function componentDocument(name: string, description: string, steps: object[]): string {
  const doc = JSON.stringify({ name: `cdk-warm-runners ${name}`, description, schemaVersion: '1.0', phases: [{ name: 'build', steps }] });
  return doc.replace('"schemaVersion":"1.0"', '"schemaVersion":1.0');
}

/** The first 16 hex digits of the certificate's SHA-256 fingerprint (of its DER). */
function certificateName(pem: string): string {
  return new X509Certificate(pem).fingerprint256.replace(/:/g, '').slice(0, 16).toLowerCase();
}

/** Throws when `pem` is not exactly one PEM certificate that parses. */
function certificateProblem(pem: string, where: string): void {
  const blocks = pem.match(/-----BEGIN [A-Z0-9 ]+-----/g) ?? [];
  if (blocks.length !== 1 || blocks[0] !== '-----BEGIN CERTIFICATE-----') {
    // Never echo the text: it may be a private key pasted by mistake.
    throw new Error(`RunnerImageStep.caCertificates: ${where} must be one PEM certificate (one "-----BEGIN CERTIFICATE-----" block, no key); it holds ${blocks.length === 0 ? 'no PEM block' : blocks.join(', ')}`);
  }
  try {
    new X509Certificate(pem);
  } catch (e) {
    throw new Error(`RunnerImageStep.caCertificates: ${where} does not parse as an X.509 certificate (${(e as Error).message})`);
  }
}
