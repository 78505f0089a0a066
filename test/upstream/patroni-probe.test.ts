import { expect, test } from 'vitest'
import { keyHeldForMs } from '../../src/upstream/patroni-probe.js'

test("a 200 vouches for ttl − loop_wait − retry_timeout, with Patroni's defaults for absent keys", () => {
  expect(keyHeldForMs({})).toBe(10_000)
  expect(keyHeldForMs({ ttl: 6, loop_wait: 1, retry_timeout: 2 })).toBe(3000)
  expect(keyHeldForMs({ loop_wait: 5 })).toBe(15_000)
  // Timings that break Patroni's rule (loop_wait + 2 × retry_timeout ≤ ttl): retry_timeout.
  expect(keyHeldForMs({ ttl: 10, retry_timeout: 4 })).toBe(4000)
})
