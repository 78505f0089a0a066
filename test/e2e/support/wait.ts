import { setTimeout as delay } from 'node:timers/promises'

/** Polls a condition until it holds; throws with `what` if it still fails after `timeoutMs`. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  { timeoutMs = 10_000, intervalMs = 25, what = 'condition' } = {},
): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await condition())) {
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await delay(intervalMs)
  }
}
