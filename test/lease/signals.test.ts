import { fork } from 'node:child_process'
import { once } from 'node:events'
import type { Redis } from 'ioredis'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { TestDatabase } from '../support/database.js'
import { buildScripts } from './support/build-scripts.js'
import {
  connectRedis,
  createTokenDatabase,
  redisUrl,
  uniqueKeyPrefix,
} from './support/lease-fixtures.js'

const keyPrefix = uniqueKeyPrefix('signals')
let db: TestDatabase
let redis: Redis
let scripts: Awaited<ReturnType<typeof buildScripts>>

beforeAll(async () => {
  ;[db, scripts] = await Promise.all([
    createTokenDatabase('lease_signals'),
    buildScripts({ 'hold-lease': 'test/lease/fixtures/hold-lease.ts' }),
  ])
  redis = connectRedis()
})

afterAll(async () => {
  redis.disconnect()
  scripts.remove()
  await db.drop()
})

describe('handleSignals', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`${signal} releases the lease and exits 0`, async () => {
      const child = fork(scripts.path('hold-lease'), {
        env: { ...process.env, REDIS_URL: redisUrl(), DATABASE_URL: db.url, KEY_PREFIX: keyPrefix },
        stdio: 'inherit',
      })
      const exited = once(child, 'exit')
      const [message] = (await once(child, 'message')) as [{ token: string }]
      expect(BigInt(message.token)).toBeGreaterThan(0n)
      const key = keyPrefix + 'held-by-child'
      expect(await redis.pttl(key)).toBeGreaterThan(20_000)

      child.kill(signal)
      const [code, killedBy] = await exited
      expect({ code, killedBy }).toEqual({ code: 0, killedBy: null })
      expect(await redis.exists(key)).toBe(0)
    })
  }
})
