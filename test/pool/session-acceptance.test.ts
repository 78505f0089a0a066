import { describe, expect, test } from 'vitest'
import {
  cancelReachesItsBackend,
  clientsKeepTheirTokens,
  fencedPool,
  tokenOf,
  tokenRules,
} from './acceptance.js'
import { backendsOf } from './support.js'

/** As large as the crowd of connected clients: each holds a server connection in session mode. */
const POOL_SIZE = 30
const pool = fencedPool('pool_session_acceptance', 'session', POOL_SIZE)

describe('session pooling, the acceptance checks of transaction mode', () => {
  test('30 clients keep their own session tokens over a pool of 30', () =>
    clientsKeepTheirTokens(pool, POOL_SIZE, 1000))

  test("PostgreSQL's rules: rollback, SET LOCAL, RESET, set_config", () => tokenRules(pool))

  test('200 short sessions queue for the pool; none inherits a token', async () => {
    const answers = await Promise.all(
      [...Array(200).keys()].map(async (i) => {
        const client = await pool.connect()
        try {
          const inherited = await tokenOf(client)
          await client.query(`SET app.fencing_token = ${i + 1}`)
          const { rows } = await client.query('SELECT $1::int AS n', [i])
          return { n: rows[0].n, inherited }
        } finally {
          await client.end()
        }
      }),
    )
    expect(answers).toEqual([...Array(200).keys()].map((n) => ({ n, inherited: '' })))
    expect(await backendsOf(pool.database)).toBeLessThanOrEqual(POOL_SIZE)
  })

  test('a cancel request reaches the backend of its client only', () =>
    cancelReachesItsBackend(pool))
})
