import { describe, expect, it } from 'vitest';
import { createDeadline, DeadlineExceeded, stepTimeoutMs } from '../../lambdas/webhook/deadline';

describe('stepTimeoutMs', () => {
  it.each([
    // remaining, cap, keep -> timeout
    [8_000, 3_000, 1_500, 3_000], // plenty left: the step's own cap
    [4_000, 3_000, 1_500, 2_500], // the cap would eat into the send's reserve: clipped
    [1_600, 3_000, 1_500, 100],
    [1_500, 3_000, 1_500, 0], // exactly the reserve left: no time for this step
    [900, 3_000, 1_500, 0], // less than the reserve
    [-50, 3_000, 0, 0], // past the deadline
    [1_200, 3_000, 0, 1_200], // the last step takes what remains
    [1_200.7, 3_000, 0, 1_200], // whole milliseconds
  ])('remaining %i, cap %i, keep %i -> %i', (remaining, cap, keep, expected) => {
    expect(stepTimeoutMs(remaining, cap, keep)).toBe(expected);
  });
});

describe('createDeadline', () => {
  it('counts down from creation on the given clock', () => {
    let t = 1_000;
    const d = createDeadline(8_000, () => t);
    expect(d.remainingMs()).toBe(8_000);
    t = 6_500;
    expect(d.remainingMs()).toBe(2_500);
  });

  it('refuses a step when only the reserve is left, without calling it', async () => {
    let called = false;
    const d = createDeadline(1_000, () => 0);
    const e = await d.run('secret read', 3_000, 1_000, () => ((called = true), Promise.resolve('x'))).catch((err: unknown) => err);
    expect(e).toBeInstanceOf(DeadlineExceeded);
    expect(e).toMatchObject({ step: 'secret read', timeoutMs: 0 });
    expect(called).toBe(false);
  });

  it("ends a step that ignores its signal at the step's timeout, and aborts the signal", async () => {
    const d = createDeadline(10_000);
    let seen: AbortSignal | undefined;
    const e = await d
      .run('tag lookup', 30, 0, (signal) => {
        seen = signal;
        return new Promise(() => undefined); // never settles
      })
      .catch((err: unknown) => err);
    expect(e).toBeInstanceOf(DeadlineExceeded);
    expect(e).toMatchObject({ step: 'tag lookup', timeoutMs: 30 });
    expect(seen?.aborted).toBe(true);
    expect(seen?.reason).toBe(e);
  });

  it('names the deadline, not the step\'s own abort error, when a step gives up on its signal at once (as the SDK does)', async () => {
    const d = createDeadline(10_000);
    const e = await d
      .run('webhook secret read', 30, 0, (signal) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(Object.assign(new Error('Request aborted'), { name: 'AbortError' })))))
      .catch((err: unknown) => err);
    expect(e).toBeInstanceOf(DeadlineExceeded);
    expect(e).toMatchObject({ step: 'webhook secret read', timeoutMs: 30 });
  });

  it("passes a step's result and its own error through", async () => {
    const d = createDeadline(10_000);
    expect(await d.run('a', 1_000, 0, () => Promise.resolve(42))).toBe(42);
    await expect(d.run('b', 1_000, 0, () => Promise.reject(new Error('ParameterNotFound')))).rejects.toThrow('ParameterNotFound');
  });
});
