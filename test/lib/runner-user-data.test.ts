import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { checkUserDataSize, encodeUserData, Provider, renderInstallScript, renderStartLogic, renderUserData, RunnerUserData, USER_DATA_LIMIT_BYTES } from '../../lib';

// The class other CDK languages call: the same results as the functions TypeScript calls.
describe('RunnerUserData', () => {
  const options = { provider: Provider.GITLAB, prefix: 'ci-fleet', prepareCommands: ['docker pull alpine:3'] };

  it('renders the user data and the start logic as the functions do', () => {
    expect(RunnerUserData.render(options)).toBe(renderUserData(options));
    expect(RunnerUserData.renderStartLogic(options)).toBe(renderStartLogic(options));
    expect(RunnerUserData.renderInstallScript(options)).toBe(renderInstallScript(options));
  });

  it('encodes as the launch templates carry it, and decodes back', () => {
    const text = RunnerUserData.render(options);
    expect(RunnerUserData.encode(text)).toBe(encodeUserData(text));
    expect(RunnerUserData.decode(RunnerUserData.encode(text))).toBe(text);
  });

  it('checks the size against EC2 limit', () => {
    const text = RunnerUserData.render(options);
    expect(RunnerUserData.LIMIT_BYTES).toBe(USER_DATA_LIMIT_BYTES);
    expect(RunnerUserData.checkSize(text)).toBe(checkUserDataSize(text));
    // Random bytes do not compress: in base64 (6 bits a character), twice the limit's worth
    // stays about twice the limit gzip-compressed.
    const incompressible = randomBytes(USER_DATA_LIMIT_BYTES * 2).toString('base64');
    expect(() => RunnerUserData.checkSize(incompressible)).toThrow(/over EC2's limit/);
  });
});
