import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { renderConfigurationDoc } from '../../scripts/docs-configuration';

it('docs/configuration.md lists every prop as the code documents it (run `npm run docs` after changing props)', () => {
  const committed = readFileSync(join(__dirname, '..', '..', 'docs', 'configuration.md'), 'utf8');
  expect(committed).toBe(renderConfigurationDoc());
});
