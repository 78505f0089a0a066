/**
 * How long a holder may act on its lease, on its own monotonic clock (`performance.now()`):
 *
 *   T_valid = T_lease × (1 − ε)
 *
 * ε (driftPpm / 10⁶) bounds the rate difference between this clock and the lease store's. The
 * design's `− d_RTT` term is not needed because the window is counted from when the acquire or
 * renewal request was *sent*: the store starts its TTL later than that, so the local window ends
 * first.
 */
export function validityMs(ttlMs: number, driftPpm: number): number {
  return ttlMs * (1 - driftPpm / 1_000_000)
}
