import { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LeaseManager, type Lease } from '../../src/lease/index.js'
import { fencedDatabase, sqlstateOf, type FencedDatabase } from '../resource/support.js'
import { startRedisFailover } from '../../src/dev/redis-failover.js'

const rounds = 10
let fenced: FencedDatabase

beforeAll(async () => {
  fenced = await fencedDatabase(
    'lease_redis_failover',
    { tables: [{ name: 'invoices' }] },
    'CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL);',
  )
})

afterAll(async () => {
  await fenced?.close()
})

/** Writes `status` to invoice 99 through pgfence, presenting the lease; the SQLSTATE or 'ok'. */
async function write(lease: Lease, status: string): Promise<string> {
  const client = await fenced.connect()
  try {
    await client.query('BEGIN')
    await lease.applyToTransaction(client)
    const outcome = await sqlstateOf(
      client.query('UPDATE invoices SET status = $1 WHERE id = 99', [status]),
    )
    await client.query(outcome === 'ok' ? 'COMMIT' : 'ROLLBACK')
    return outcome
  } finally {
    await client.end()
  }
}

describe('the redis store across a Sentinel failover', () => {
  it(`grants one lease twice when the replica missed it, and pgfence keeps the stale write out (${rounds} rounds)`, async () => {
    // The fixture's own connection resets the row, token included, as maintenance.
    const direct = await fenced.connectDirect()
    await direct.query('SET pgfence.maintenance = on')
    for (let round = 0; round < rounds; round++) {
      await direct.query(`INSERT INTO invoices (id, status, fencing_token) VALUES (99, 'PENDING', 0)
        ON CONFLICT (id) DO UPDATE SET status = 'PENDING', fencing_token = 0`)
      const redis = await startRedisFailover()
      const [first, second] = [
        new Redis(redis.primaryUrl, { retryStrategy: () => null }),
        new Redis(redis.sentinelOptions),
      ]
      for (const connection of [first, second]) connection.on('error', () => {})
      const managers = [first, second].map(
        (connection) =>
          new LeaseManager({
            store: { redis: connection },
            tokenSource: fenced.db.url,
            ttlMs: 30_000,
            handleSignals: false,
          }),
      )
      try {
        redis.holdBackReplica()
        const worker1 = await managers[0]!.acquire('invoice:99')
        await redis.failOver()
        // Its connection may still be finding the new primary through Sentinel: it waits for it.
        const worker2 = await managers[1]!.acquire('invoice:99', { waitMs: 10_000 })
        // Both hold it: neither has been told otherwise, and both have time left.
        for (const lease of [worker1, worker2]) {
          expect(lease.signal.aborted).toBe(false)
          expect(lease.remainingMs()).toBeGreaterThan(0)
        }
        expect(worker2.token).toBeGreaterThan(worker1.token)

        expect(await write(worker2, 'B')).toBe('ok')
        expect(await write(worker1, 'A')).toBe('PF409')
        const { rows } = await direct.query(
          'SELECT status, fencing_token::text AS token FROM invoices WHERE id = 99',
        )
        expect(rows[0]).toEqual({ status: 'B', token: worker2.token.toString() })
      } finally {
        await Promise.allSettled(managers.map((manager) => manager.close()))
        first.disconnect()
        second.disconnect()
        await redis.stop()
      }
    }
  }, 180_000)
})
