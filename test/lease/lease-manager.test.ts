import { performance } from 'node:perf_hooks'
import { Redis } from 'ioredis'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  LeaseLostError,
  LeaseManager,
  LeaseUnavailableError,
  type Lease,
} from '../../src/lease/index.js'
import type { TestDatabase } from '../support/database.js'
import { createTestDatabase } from '../support/database.js'
import { startFreezableProxy } from './support/freezable-proxy.js'
import {
  abortReason,
  connectRedis,
  createTokenDatabase,
  managerFactory,
  redisUrl,
  uniqueKeyPrefix,
} from './support/lease-fixtures.js'

const ttlMs = 300
const keyPrefix = uniqueKeyPrefix('lease-manager')
let db: TestDatabase
let redis: Redis
let tokenPool: pg.Pool
let managers: ReturnType<typeof managerFactory>

beforeAll(async () => {
  db = await createTokenDatabase('lease_manager')
  redis = connectRedis()
  // One warm pool: a cold connection could take longer than the short TTLs used here.
  tokenPool = new pg.Pool({ connectionString: db.url })
  await tokenPool.query('SELECT pgfence.next_token()')
  managers = managerFactory({ tokenSource: tokenPool, ttlMs, keyPrefix })
})

afterAll(async () => {
  await managers.closeAll()
  await tokenPool.end()
  redis.disconnect()
  await db.drop()
})

function busyWait(ms: number): void {
  const until = performance.now() + ms
  while (performance.now() < until) {
    // the event loop is blocked on purpose: no timer, no I/O
  }
}

async function expectLost(lease: Lease, reason: string): Promise<LeaseLostError> {
  const error = await abortReason(lease.signal)
  expect(error).toBeInstanceOf(LeaseLostError)
  expect((error as LeaseLostError).reason).toBe(reason)
  return error as LeaseLostError
}

describe('LeaseManager', () => {
  it('refuses a second holder while the first renews for several TTLs', async () => {
    const first = managers.create()
    const second = managers.create()
    const lease = await first.acquire('exclusive')
    const waitMs = ttlMs * 4
    const startedAt = performance.now()
    await expect(second.acquire('exclusive', { waitMs })).rejects.toBeInstanceOf(
      LeaseUnavailableError,
    )
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(waitMs)
    expect(lease.signal.aborted).toBe(false)
    expect(lease.remainingMs()).toBeGreaterThan(0)
    expect(await redis.pttl(keyPrefix + 'exclusive')).toBeGreaterThan(0)

    expect(await lease.release()).toBe(true)
    const next = await second.acquire('exclusive')
    expect(next.token).toBeGreaterThan(lease.token)
    await next.release()
  })

  it('hands the lease to a waiter as soon as the holder releases it', async () => {
    const holder = await managers.create().acquire('handover')
    const waiting = managers.create().acquire('handover', { waitMs: 5000 })
    expect(await holder.release()).toBe(true)
    const lease = await waiting
    expect(lease.token).toBeGreaterThan(holder.token)
    await lease.release()
  })

  it('aborts a holder whose key was deleted within ttl/3, and its release spares the new key', async () => {
    const old = await managers.create().acquire('stolen')
    const key = keyPrefix + 'stolen'
    const deletedAt = performance.now()
    expect(await redis.del(key)).toBe(1)
    const thief = await managers.create().acquire('stolen')

    await expectLost(old, 'lost')
    expect(performance.now() - deletedAt).toBeLessThan(ttlMs / 3 + 150)
    expect(old.remainingMs()).toBeLessThanOrEqual(0)
    expect(await old.release()).toBe(false)
    expect(await redis.exists(key)).toBe(1)
    expect(await thief.release()).toBe(true)
    expect(await redis.exists(key)).toBe(0)
  })

  it('is over at once after the event loop was blocked longer than the TTL', async () => {
    const lease = await managers.create().acquire('blocked')
    expect(lease.remainingMs()).toBeGreaterThan(0)
    busyWait(ttlMs + 50)
    expect(lease.remainingMs()).toBeLessThanOrEqual(0)
    expect(lease.signal.aborted).toBe(false)
    const unblockedAt = performance.now()
    await expectLost(lease, 'expired')
    expect(performance.now() - unblockedAt).toBeLessThan(50)
    await lease.release()
  })

  it('aborts when a renewal gets no ack within ttl/3', async () => {
    const proxy = await startFreezableProxy(new URL(redisUrl()))
    const connection = new Redis(proxy.url)
    const manager = new LeaseManager({
      redis: connection,
      tokenSource: tokenPool,
      ttlMs,
      keyPrefix,
      handleSignals: false,
    })
    const lease = await manager.acquire('unanswered')
    proxy.freeze()
    const frozenAt = performance.now()
    const error = await expectLost(lease, 'lost')
    expect(String((error.cause as Error).message)).toMatch(/no ack/)
    expect(performance.now() - frozenAt).toBeLessThan((2 * ttlMs) / 3 + 150)
    connection.disconnect()
    await expect(manager.close()).rejects.toThrow(/Connection is closed/)
    await proxy.close()
  })

  it('issues strictly increasing bigint tokens across managers and resources', async () => {
    const a = managers.create({ tokenSource: db.url, ttlMs: 10_000 })
    const b = managers.create({ keyPrefix: uniqueKeyPrefix('lease-manager-b') })
    const tokens: bigint[] = []
    for (let round = 0; round < 5; round++) {
      for (const [manager, resource] of [
        [a, 'x'],
        [b, 'x'],
        [a, 'y'],
        [b, 'z'],
      ] as const) {
        const lease = await manager.acquire(resource)
        tokens.push(lease.token)
        await lease.release()
      }
    }
    expect(tokens.every((token) => typeof token === 'bigint')).toBe(true)
    tokens.slice(1).forEach((token, i) => expect(token).toBeGreaterThan(tokens[i]!))

    const concurrent = await Promise.all(
      ['c1', 'c2', 'c3', 'c4', 'c5', 'c6'].map((resource, i) =>
        (i % 2 ? a : b).withLease(resource, async (lease) => lease.token),
      ),
    )
    expect(new Set(concurrent).size).toBe(concurrent.length)
    expect(concurrent.every((token) => token > tokens.at(-1)!)).toBe(true)
  })

  it('keeps tokens exact above 2^53', async () => {
    const big = await createTokenDatabase('lease_big_tokens')
    try {
      const client = new pg.Client({ connectionString: big.url })
      await client.connect()
      // Every token carries its timeline above 2^62 (src/schema/token-source.ts).
      await client.query("SELECT setval('pgfence.token_seq', 9007199254)")
      const { rows } = await client.query('SELECT pgfence.timeline()::text AS timeline')
      await client.end()
      const lease = await managers.create({ tokenSource: big.url, ttlMs: 10_000 }).acquire('big')
      expect(lease.token).toBe(2n ** 62n + BigInt(rows[0].timeline) * 2n ** 40n + 9007199255n)
      expect(lease.token > 2n ** 53n).toBe(true)
      await lease.release()
    } finally {
      await big.drop()
    }
  })

  it('applyTo sets app.fencing_token on the connection', async () => {
    const lease = await managers.create().acquire('apply')
    const client = new pg.Client({ connectionString: db.url })
    await client.connect()
    try {
      await lease.applyTo(client)
      const { rows } = await client.query('SHOW app.fencing_token')
      expect(rows[0]['app.fencing_token']).toBe(lease.token.toString())
    } finally {
      await client.end()
      await lease.release()
    }
  })

  it('withLease releases even when the work throws', async () => {
    let seen: Lease | undefined
    const work = managers.create().withLease('throws', async (lease) => {
      seen = lease
      throw new Error('work failed')
    })
    await expect(work).rejects.toThrow('work failed')
    await expectLost(seen!, 'released')
    expect(await redis.exists(keyPrefix + 'throws')).toBe(0)
  })

  it('close() ends every lease with "shutdown" and removes the keys', async () => {
    const manager = managers.create()
    const leases = await Promise.all(['s1', 's2'].map((resource) => manager.acquire(resource)))
    await manager.close()
    for (const lease of leases) await expectLost(lease, 'shutdown')
    expect(await redis.exists(keyPrefix + 's1', keyPrefix + 's2')).toBe(0)
    await expect(manager.acquire('s3')).rejects.toThrow(/closed/)
  })

  it('names a missing redis or tokenSource option at construction', () => {
    const options = { redis: redisUrl(), tokenSource: db.url, handleSignals: false }
    expect(() => new LeaseManager({ ...options, tokenSource: undefined! })).toThrow(
      /option tokenSource is missing; it takes a PostgreSQL URL/,
    )
    expect(() => new LeaseManager({ ...options, redis: undefined! })).toThrow(
      /option redis is missing; it takes a Redis URL/,
    )
  })

  it('gives the key back when no token can be drawn', async () => {
    const bare = await createTestDatabase('lease_no_token_source')
    try {
      const manager = managers.create({ tokenSource: bare.url })
      await expect(manager.acquire('no-token')).rejects.toMatchObject({ code: '3F000' })
      expect(await redis.exists(keyPrefix + 'no-token')).toBe(0)
    } finally {
      await bare.drop()
    }
  })
})
