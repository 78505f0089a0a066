import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { sqlstateOf, startFencedStack, type FencedStack } from './support.js'
import { startWideCluster } from './wide-cluster.js'

const clientCount = 100
let stack: FencedStack

beforeAll(async () => {
  stack = await startFencedStack(await startWideCluster(clientCount + 20))
})

afterAll(async () => {
  await stack?.close()
})

/** Client `i` owns invoice 2000 + i and holds tokens 1000 × (i + 1) + step. */
const rowOf = (i: number) => 2000 + i
const tokenOf = (i: number, step: number) => String(1000 * (i + 1) + step)

async function writeOwnRow(client: pg.Client, i: number): Promise<string> {
  for (let step = 1; step <= 3; step++) {
    await client.query(`SET app.fencing_token = ${tokenOf(i, step)}`)
    const result = await client.query('UPDATE invoices SET amount = $1 WHERE id = $2', [
      step,
      rowOf(i),
    ])
    expect(result.rowCount).toBe(1)
  }
  await client.query(`SET app.fencing_token = ${tokenOf(i, 2)}`)
  return sqlstateOf(client.query('UPDATE invoices SET amount = -1 WHERE id = $1', [rowOf(i)]))
}

test(`${clientCount} concurrent connections each fence their own row with their own tokens`, async () => {
  await stack.admin.query(
    `INSERT INTO invoices (id, status, fencing_token)
     SELECT 2000 + i, 'PENDING', 100 FROM generate_series(0, $1 - 1) i`,
    [clientCount],
  )
  const clients = Array.from(
    { length: clientCount },
    () => new pg.Client({ connectionString: stack.url }),
  )
  await Promise.all(clients.map((client) => client.connect()))
  try {
    // A pooled client is greeted first and lent its own server connection right after.
    const backends = async () =>
      (
        await stack.admin.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE backend_type = 'client backend'",
        )
      ).rows[0].n
    await expect.poll(backends, { timeout: 10_000 }).toBeGreaterThan(clientCount)
    const staleAttempts = await Promise.all(clients.map((client, i) => writeOwnRow(client, i)))
    expect(staleAttempts).toEqual(Array(clientCount).fill('PF409'))
  } finally {
    await Promise.all(clients.map((client) => client.end()))
  }
  const { rows } = await stack.admin.query(
    'SELECT id, amount, fencing_token FROM invoices WHERE id >= 2000 ORDER BY id',
  )
  expect(rows).toEqual(
    Array.from({ length: clientCount }, (_, i) => ({
      id: rowOf(i),
      amount: 3,
      fencing_token: tokenOf(i, 3),
    })),
  )
})
