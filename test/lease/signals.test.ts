import { fork } from 'node:child_process'
import { once } from 'node:events'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { TestDatabase } from '../support/database.js'
import { buildScripts } from './support/build-scripts.js'
import { createTokenDatabase, uniqueKeyPrefix } from './support/lease-fixtures.js'
import { openStoreFixture, storeKinds, type StoreFixture } from './support/lease-stores.js'

const keyPrefix = uniqueKeyPrefix('signals')
let db: TestDatabase
let scripts: Awaited<ReturnType<typeof buildScripts>>

beforeAll(async () => {
  ;[db, scripts] = await Promise.all([
    createTokenDatabase('lease_signals'),
    buildScripts({ 'hold-lease': 'test/lease/fixtures/hold-lease.ts' }),
  ])
})

afterAll(async () => {
  scripts.remove()
  await db.drop()
})

describe.each(storeKinds)('handleSignals with the %s store', (kind) => {
  let store: StoreFixture

  beforeAll(() => {
    store = openStoreFixture(kind, { databaseUrl: db.url, keyPrefix })
  })

  afterAll(() => store.close())

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`${signal} releases the lease and exits 0`, async () => {
      const child = fork(scripts.path('hold-lease'), {
        env: {
          ...process.env,
          LEASE_STORE: JSON.stringify(store.option()),
          DATABASE_URL: db.url,
          KEY_PREFIX: keyPrefix,
        },
        stdio: 'inherit',
      })
      const exited = once(child, 'exit')
      const [message] = (await once(child, 'message')) as [{ token: string }]
      expect(BigInt(message.token)).toBeGreaterThan(0n)
      expect(await store.held('held-by-child')).toBe(true)

      child.kill(signal)
      const [code, killedBy] = await exited
      expect({ code, killedBy }).toEqual({ code: 0, killedBy: null })
      expect(await store.held('held-by-child')).toBe(false)
    })
  }
})
