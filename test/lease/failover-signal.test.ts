import { performance } from 'node:perf_hooks'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { LeaseLostError, LeaseManager } from '../../src/lease/index.js'
import { tokenTimeline } from '../../src/schema/token-layout.js'
import { waitFor } from '../e2e/support/wait.js'
import { fencingConfig, installFencing } from '../fence/support.js'
import { queryOnce } from '../support/database.js'
import { startReplicaPair, type ReplicaPair } from '../support/replica-pair.js'
import { abortReason, redisUrl, uniqueKeyPrefix } from './support/lease-fixtures.js'

/** Renewals every second: the failover is seen within about one. */
const ttlMs = 3000
let pair: ReplicaPair

beforeAll(async () => {
  pair = await startReplicaPair('lease-failover')
  await installFencing(pair.primary.url, fencingConfig())
}, 60_000)

afterAll(async () => {
  await pair?.remove()
})

/** Waits (bounded) until the standby has replayed everything the primary has written. */
async function replayed(): Promise<void> {
  const { rows } = await queryOnce(pair.primary.url, 'SELECT pg_current_wal_lsn()::text AS lsn')
  await waitFor(
    async () =>
      (
        await queryOnce(
          pair.standby.url,
          `SELECT pg_last_wal_replay_lsn() >= '${rows[0].lsn}'::pg_lsn AS done`,
        )
      ).rows[0].done === true,
    { what: 'the standby to replay the leases' },
  )
}

test("a promotion of the token source's primary aborts held leases with reason failover within a renewal period", async () => {
  // Both nodes, primary first: the stores and the token source follow the primary.
  const hosts = `postgres://postgres@${pair.primary.hostPort},${pair.standby.hostPort}/postgres`
  const managers = [
    new LeaseManager({ store: { postgres: hosts }, ttlMs, handleSignals: false }),
    new LeaseManager({
      store: { redis: redisUrl() },
      keyPrefix: uniqueKeyPrefix('lease-failover'),
      tokenSource: hosts,
      ttlMs,
      handleSignals: false,
    }),
  ]
  try {
    const leases = await Promise.all(managers.map((manager) => manager.acquire('invoice-99')))
    expect(leases.map((lease) => tokenTimeline(lease.token))).toEqual([1, 1])
    await replayed()
    // Promoted first, so that the old primary answers (on timeline 1) until it goes: renewals
    // never fail for want of a primary, and only the timeline can end the leases.
    await pair.standby.promote()
    expect(leases.map((lease) => lease.signal.aborted)).toEqual([false, false])
    const crashedAt = performance.now()
    await pair.primary.crash()
    const reasons = await Promise.all(leases.map((lease) => abortReason(lease.signal)))
    const seenAfterMs = performance.now() - crashedAt
    for (const reason of reasons) {
      expect(reason).toBeInstanceOf(LeaseLostError)
      expect((reason as LeaseLostError).reason).toBe('failover')
      expect(String((reason as LeaseLostError).cause)).toContain('timeline 2')
    }
    // The next renewal (ttl/3 at most) asks the new primary; generous for a loaded machine.
    expect(seenAfterMs).toBeLessThan(ttlMs / 3 + 4000)
    // A new lease has a token of the new timeline, above every earlier one.
    const after = await managers[1]!.acquire('invoice-100')
    expect(tokenTimeline(after.token)).toBe(2)
    expect(after.token > leases[1]!.token).toBe(true)
    await after.release()
  } finally {
    await Promise.all(managers.map((manager) => manager.close()))
  }
})
