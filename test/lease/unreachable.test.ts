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
import { freePort } from './support/throwaway-cluster.js'

const keyPrefix = uniqueKeyPrefix('unreachable')
const waitMs = 1000
let db: TestDatabase
let redis: Redis
let scripts: Awaited<ReturnType<typeof buildScripts>>
let closedPort: number

beforeAll(async () => {
  ;[db, scripts, closedPort] = await Promise.all([
    createTokenDatabase('lease_unreachable'),
    buildScripts({ 'acquire-unreachable': 'test/lease/fixtures/acquire-unreachable.ts' }),
    freePort(),
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
  causeCode?: string
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

const closed = () => `127.0.0.1:${closedPort}`

/**
 * LeaseUnavailableError naming `source`, with the refused connection as cause, after waitMs and
 * little more; then the process ended on its own.
 */
function expectUnavailable(outcome: Outcome, source: string): void {
  expect(outcome).toMatchObject({
    name: 'LeaseUnavailableError',
    causeCode: 'ECONNREFUSED',
    exitCode: 0,
  })
  expect(outcome.message).toContain(`${source} does not answer`)
  expect(outcome.elapsedMs).toBeGreaterThanOrEqual(waitMs)
  expect(outcome.elapsedMs).toBeLessThan(waitMs + 400)
  expect(outcome.exitAfterMs).toBeLessThan(1000)
}

describe('acquire with an unreachable store or token source', () => {
  for (const call of ['acquire', 'withLease']) {
    it(`${call}: Redis on a closed port gives LeaseUnavailableError after waitMs, with the connection error as cause`, async () => {
      const outcome = await requestLease({
        CALL: call,
        REDIS_URL: `redis://${closed()}`,
        DATABASE_URL: db.url,
      })
      expectUnavailable(outcome, 'the lease store (Redis)')
    })

    it(`${call}: a token source on a closed port gives LeaseUnavailableError after waitMs, and no key stays`, async () => {
      const tokenSource = new URL(db.url)
      tokenSource.host = closed()
      const outcome = await requestLease({
        CALL: call,
        REDIS_URL: redisUrl(),
        DATABASE_URL: tokenSource.toString(),
      })
      expectUnavailable(outcome, 'the token source (PostgreSQL)')
      expect(await redis.exists(keyPrefix + 'unreachable')).toBe(0)
    })
  }
})

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
