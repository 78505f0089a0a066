import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { performance } from 'node:perf_hooks'
import { createInterface } from 'node:readline'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LeaseLostError, LeaseManager } from '../../src/lease/index.js'
import type { TestDatabase } from '../support/database.js'
import { buildScripts } from './support/build-scripts.js'
import { startFreezableProxy } from '../../src/dev/freezable-proxy.js'
import {
  connectRedis,
  createTokenDatabase,
  redisUrl,
  uniqueKeyPrefix,
} from './support/lease-fixtures.js'
import {
  openStoreFixture,
  storeKinds,
  type StoreFixture,
  type StoreKind,
} from './support/lease-stores.js'
import { closedPort } from '../e2e/support/ports.js'

const keyPrefix = uniqueKeyPrefix('unreachable')
const waitMs = 1000
let db: TestDatabase
let redis: Redis
let scripts: Awaited<ReturnType<typeof buildScripts>>
let refusing: number

beforeAll(async () => {
  ;[db, scripts, refusing] = await Promise.all([
    createTokenDatabase('lease_unreachable'),
    buildScripts({ 'acquire-unreachable': 'test/lease/fixtures/acquire-unreachable.ts' }),
    closedPort(),
  ])
  redis = connectRedis()
})

afterAll(async () => {
  redis?.disconnect()
  scripts?.remove()
  await db?.drop()
})

interface Outcome {
  elapsedMs: number
  name?: string
  message?: string
  causeCode?: unknown
  causeMessage?: string
  /** From the report to the process's exit, on its own. */
  exitAfterMs: number
  exitCode: number | null
}

/** Runs the fixture in a process of its own, so that a handle left open would keep it alive. */
async function requestLease(env: Record<string, string>): Promise<Outcome> {
  const child = spawn(process.execPath, [scripts.path('acquire-unreachable')], {
    env: { ...process.env, KEY_PREFIX: keyPrefix, WAIT_MS: String(waitMs), ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const exited = once(child, 'exit')
  const lines = createInterface({ input: child.stdout })
  const [line] = (await once(lines, 'line')) as [string]
  const reportedAt = performance.now()
  const [exitCode] = (await exited) as [number | null]
  return { ...JSON.parse(line), exitAfterMs: performance.now() - reportedAt, exitCode }
}

/** `url` (a store's or the token database's) with its host moved to a port nobody listens on. */
function onClosedPort(url: string): string {
  const moved = new URL(url)
  moved.host = `127.0.0.1:${refusing}`
  // gRPC (etcd) takes host:port without a path.
  return moved.href.replace(/\/$/, '')
}

/**
 * LeaseUnavailableError naming `source`, with the refused connection as cause, after waitMs and
 * little more; then the process ended on its own.
 */
function expectUnavailable(outcome: Outcome, source: string): void {
  expect(outcome).toMatchObject({ name: 'LeaseUnavailableError', exitCode: 0 })
  expect(outcome.message).toContain(`${source} does not answer`)
  expect(`${outcome.causeCode} ${outcome.causeMessage}`).toMatch(/ECONNREFUSED/)
  expect(outcome.elapsedMs).toBeGreaterThanOrEqual(waitMs)
  expect(outcome.elapsedMs).toBeLessThan(waitMs + 400)
  expect(outcome.exitAfterMs).toBeLessThan(1000)
}

/**
 * What is down for each store: the store itself, and the token source where it is a server of
 * its own (the postgres store draws its tokens in the grant: there it is the store).
 */
const storeNames = {
  postgres: 'the lease store (PostgreSQL)',
  redis: 'the lease store (Redis)',
  etcd: 'the lease store (etcd)',
} satisfies Record<StoreKind, string>
const cases = storeKinds.flatMap((kind) => [
  { kind, down: 'store' as const, source: storeNames[kind] },
  ...(kind === 'postgres'
    ? []
    : [{ kind, down: 'token source' as const, source: 'the token source (PostgreSQL)' }]),
])

describe.each(cases)(
  'the $kind store with its $down on a closed port',
  ({ kind, down, source }) => {
    let store: StoreFixture

    beforeAll(() => {
      store = openStoreFixture(kind, { databaseUrl: db.url, keyPrefix })
    })

    afterAll(() => store.close())

    for (const call of ['acquire', 'withLease']) {
      it(`${call} gives LeaseUnavailableError after waitMs naming ${source}, and no lease stays`, async () => {
        const outcome = await requestLease({
          CALL: call,
          LEASE_STORE: JSON.stringify(
            store.option(down === 'store' ? onClosedPort(store.url) : undefined),
          ),
          DATABASE_URL: down === 'token source' ? onClosedPort(db.url) : db.url,
        })
        expectUnavailable(outcome, source)
        expect(await store.held('unreachable')).toBe(false)
      })
    }
  },
)

describe('close() with a lease held', () => {
  it('gives up the release once Redis is gone, and ends the lease with "shutdown"', async () => {
    const relay = await startFreezableProxy(new URL(redisUrl()))
    const manager = new LeaseManager({
      redis: relay.url,
      tokenSource: db.url,
      keyPrefix,
      handleSignals: false,
    })
    const lease = await manager.acquire('held-when-gone')
    await relay.close()
    const closedAt = performance.now()
    // Closed by the relay, then refused: whichever the release sees first.
    await expect(manager.close()).rejects.toThrow(/reconnecting|ECONNREFUSED/)
    expect(performance.now() - closedAt).toBeLessThan(1000)
    expect(lease.signal.reason).toEqual(expect.any(LeaseLostError))
    expect((lease.signal.reason as LeaseLostError).reason).toBe('shutdown')
    await redis.del(keyPrefix + 'held-when-gone')
  })
})
