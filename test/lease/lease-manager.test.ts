import { performance } from 'node:perf_hooks'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  LeaseLostError,
  LeaseManager,
  LeaseUnavailableError,
  type Lease,
  type LeaseManagerOptions,
} from '../../src/lease/index.js'
import type { TestDatabase } from '../support/database.js'
import { startFreezableProxy } from '../../src/dev/freezable-proxy.js'
import {
  abortReason,
  createTokenDatabase,
  managerFactory,
  redisUrl,
  runSql,
  uniqueKeyPrefix,
} from './support/lease-fixtures.js'
import { openStoreFixture, storeKinds, type StoreFixture } from './support/lease-stores.js'

// Long enough for a loaded machine to answer a renewal well within ttl/3.
const ttlMs = 600
const keyPrefix = uniqueKeyPrefix('lease-manager')
let db: TestDatabase
let tokenPool: pg.Pool

beforeAll(async () => {
  db = await createTokenDatabase('lease_manager')
  // One warm pool, as many connections as the tests use at once: a cold connection could take
  // longer than the short TTLs used here.
  tokenPool = new pg.Pool({ connectionString: db.url })
  await Promise.all(Array.from({ length: 6 }, () => tokenPool.query('SELECT pg_sleep(0.05)')))
})

afterAll(async () => {
  await tokenPool.end()
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

describe.each(storeKinds)('LeaseManager with the %s store', (kind) => {
  let store: StoreFixture
  let managers: ReturnType<typeof managerFactory>

  beforeAll(async () => {
    store = openStoreFixture(kind, { databaseUrl: db.url, keyPrefix })
    // The postgres store shares the warm pool: its own would start cold.
    const option = kind === 'postgres' ? { postgres: tokenPool } : store.option()
    managers = managerFactory({ store: option, tokenSource: tokenPool, ttlMs, keyPrefix })
    // The store is up before the short TTLs start counting.
    await (await managers.create().acquire('warm-up')).release()
  })

  afterAll(async () => {
    await managers.closeAll()
    await store.close()
  })

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
    expect(await store.held('exclusive')).toBe(true)

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

  it('aborts a holder whose record was deleted within ttl/3, and its release spares the new one', async () => {
    const old = await managers.create().acquire('stolen')
    const deletedAt = performance.now()
    await store.remove('stolen')
    expect(await store.held('stolen')).toBe(false)
    const thief = await managers.create().acquire('stolen')

    await expectLost(old, 'lost')
    expect(performance.now() - deletedAt).toBeLessThan(ttlMs / 3 + 150)
    expect(old.remainingMs()).toBeLessThanOrEqual(0)
    expect(await old.release()).toBe(false)
    expect(await store.held('stolen')).toBe(true)
    expect(await thief.release()).toBe(true)
    expect(await store.held('stolen')).toBe(false)
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
    const proxy = await startFreezableProxy(new URL(store.url))
    const manager = new LeaseManager({
      store: store.via(proxy.url),
      tokenSource: tokenPool,
      ttlMs,
      keyPrefix,
      handleSignals: false,
    })
    try {
      const lease = await manager.acquire('unanswered')
      proxy.freeze()
      const frozenAt = performance.now()
      const error = await expectLost(lease, 'lost')
      expect(String((error.cause as Error).message)).toMatch(/no ack/)
      expect(performance.now() - frozenAt).toBeLessThan((2 * ttlMs) / 3 + 150)
    } finally {
      await proxy.close()
    }
    // The release at close cannot reach the store any more.
    await expect(manager.close()).rejects.toThrow()
  })

  it('issues strictly increasing bigint tokens across managers and resources', async () => {
    const a = managers.create({ store: store.option(), tokenSource: db.url, ttlMs: 10_000 })
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
      await runSql(big.url, "SELECT setval('pgfence.token_seq', 9007199254)")
      const { rows } = await runSql(big.url, 'SELECT pgfence.timeline()::text AS timeline')
      const manager = managers.create({
        store: kind === 'postgres' ? store.option(big.url) : store.option(),
        tokenSource: big.url,
        ttlMs: 10_000,
      })
      const lease = await manager.acquire('big')
      // Every token carries its timeline above 2^62 (src/schema/token-source.ts).
      expect(lease.token).toBe(2n ** 62n + BigInt(rows[0].timeline) * 2n ** 40n + 9007199255n)
      expect(lease.token > 2n ** 53n).toBe(true)
      await lease.release()
      await manager.close()
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
    expect(await store.held('throws')).toBe(false)
  })

  it('close() ends every lease with "shutdown" and removes the records', async () => {
    const manager = managers.create()
    const leases = await Promise.all(['s1', 's2'].map((resource) => manager.acquire(resource)))
    expect(await store.held('s1')).toBe(true)
    await manager.close()
    for (const lease of leases) await expectLost(lease, 'shutdown')
    expect([await store.held('s1'), await store.held('s2')]).toEqual([false, false])
    await expect(manager.acquire('s3')).rejects.toThrow(/closed/)
  })

  it('leaves no lease behind when no token can be drawn', async () => {
    // The last token drawn becomes the sequence's maximum: the next one cannot be drawn.
    await runSql(
      db.url,
      `DO $$ BEGIN
        PERFORM pgfence.next_token();
        EXECUTE format('ALTER SEQUENCE pgfence.token_seq MAXVALUE %s',
          (SELECT last_value FROM pgfence.token_seq));
      END $$`,
    )
    try {
      await expect(managers.create().acquire('no-token')).rejects.toMatchObject({
        code: '2200H',
      })
      expect(await store.held('no-token')).toBe(false)
    } finally {
      await runSql(db.url, 'ALTER SEQUENCE pgfence.token_seq NO MAXVALUE')
    }
  })
})

describe('LeaseManager options', () => {
  it('keeps the top-level redis option of v2', async () => {
    const manager = new LeaseManager({
      redis: redisUrl(),
      tokenSource: db.url,
      keyPrefix,
      handleSignals: false,
    })
    const lease = await manager.acquire('v2-option')
    expect(lease.token).toBeGreaterThan(0n)
    await manager.close()
  })

  it('refuses a store it cannot name, two stores, or a missing token source', () => {
    const refuse = (options: object, message: RegExp) =>
      expect(
        () => new LeaseManager({ handleSignals: false, ...(options as LeaseManagerOptions) }),
      ).toThrow(message)
    refuse({ tokenSource: db.url }, /store must be/)
    refuse({ store: { mysql: db.url }, tokenSource: db.url }, /store must be/)
    refuse({ store: { postgres: db.url }, redis: redisUrl() }, /either store or redis/)
    refuse({ store: { redis: redisUrl() } }, /tokenSource is required/)
    refuse({ store: { etcd: 'http://127.0.0.1:1' } }, /tokenSource is required/)
  })
})
