import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'lambdas/**/*.test.ts', 'lib/**/*.test.ts', 'local/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
