import type pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import {
  fencedDatabase,
  leader,
  sqlstateOf,
  waitUntilBlocked,
  type FencedDatabase,
} from './support.js'

const fencing = {
  resources: [{ tables: ['entries', 'batch_log'], resource: 'billing' }],
  tables: [{ name: 'unrelated' }],
}
const schema = `
CREATE TABLE unrelated (id int PRIMARY KEY);
CREATE TABLE entries (id bigserial PRIMARY KEY, token bigint NOT NULL, batch int NOT NULL, k int NOT NULL);
-- Written last in each batch's transaction: seq orders the committed batches.
CREATE TABLE batch_log (seq bigserial PRIMARY KEY, token bigint NOT NULL, batch int NOT NULL);
`

let fenced: FencedDatabase
let direct: pg.Client

beforeAll(async () => {
  fenced = await fencedDatabase('resource_concurrency', fencing, schema)
  direct = await fenced.connectDirect()
})

afterAll(async () => {
  await fenced?.close()
})

test("a new leader's raise waits for the old leader's open transaction, which is refused afterwards", async () => {
  const old = await leader(fenced, 12)
  await old.query('BEGIN')
  await old.query('INSERT INTO entries (token, batch, k) VALUES (12, 1, 1)')
  const next = await leader(fenced, 13)
  const nextPid = (await next.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number
  let raised = false
  const raise = next.query("SELECT pgfence.raise_fence('billing', 13)").then(() => (raised = true))
  await waitUntilBlocked(direct, nextPid)
  expect(raised).toBe(false)
  await old.query('INSERT INTO entries (token, batch, k) VALUES (12, 1, 2)')
  await old.query('COMMIT')
  await raise
  expect(
    await sqlstateOf(old.query('INSERT INTO entries (token, batch, k) VALUES (12, 2, 1)')),
  ).toBe('PF409')
  const { rows } = await direct.query('SELECT batch, k FROM entries ORDER BY id')
  expect(rows).toEqual([
    { batch: 1, k: 1 },
    { batch: 1, k: 2 },
  ])
})

const pause = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.random() * 3))

test('torture: 8 leaders with increasing tokens commit whole batches, in token order', async () => {
  let nextToken = 100
  const refusals: string[] = []
  let committed = 0

  const runLeader = async (): Promise<void> => {
    const client = await fenced.connect()
    let token = ++nextToken
    let batch = 0
    // Until both outcomes were seen enough; the bound turns a fence that never refuses into a failure.
    for (let attempt = 0; attempt < 300 && (committed < 10 || refusals.length < 3); attempt++) {
      batch++
      await client.query(`SET app.fencing_token = ${token}`)
      try {
        await client.query('BEGIN')
        for (let k = 1; k <= 3; k++) {
          await client.query('INSERT INTO entries (token, batch, k) VALUES ($1, $2, $3)', [
            token,
            batch,
            k,
          ])
          await pause()
        }
        await client.query('INSERT INTO batch_log (token, batch) VALUES ($1, $2)', [token, batch])
        await client.query('COMMIT')
        committed++
      } catch (err) {
        refusals.push((err as { code?: string }).code ?? String(err))
        await client.query('ROLLBACK')
        // Deposed: take the lock again, with a new, higher token.
        token = ++nextToken
      }
      await pause()
    }
  }
  await Promise.all(Array.from({ length: 8 }, runLeader))

  expect(committed).toBeGreaterThanOrEqual(10)
  expect(refusals.length).toBeGreaterThanOrEqual(3)
  expect(new Set(refusals)).toEqual(new Set(['PF409']))

  const log = (await direct.query('SELECT token::int, batch FROM batch_log ORDER BY seq')).rows.map(
    (row) => [row.token as number, row.batch as number],
  )
  expect(log.length).toBe(committed)
  const tokens = log.map(([token]) => token)
  expect(tokens).toEqual([...tokens].sort((a, b) => a - b))

  const sizes = await direct.query(
    'SELECT token::int, batch, count(*)::int AS n FROM entries WHERE token >= 100 GROUP BY token, batch ORDER BY 1, 2',
  )
  expect(sizes.rows.map((row) => [row.token, row.batch])).toEqual(
    [...log].sort((a, b) => a[0]! - b[0]! || a[1]! - b[1]!),
  )
  expect(new Set(sizes.rows.map((row) => row.n))).toEqual(new Set([3]))
})
