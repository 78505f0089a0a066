import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { waitFor } from './support/wait.js'

let db: TestDatabase
let proxy: TestProxy
let sql: postgres.Sql

beforeAll(async () => {
  db = await createTestDatabase('e2e_postgres_js')
  proxy = await startTestProxy({}, db.url)
  // One connection, so that concurrent queries are pipelined on it.
  sql = postgres(proxy.url(), {
    max: 1,
    onnotice: () => {},
    connection: { application_name: 'pgfence-e2e-postgres-js' },
  })
  await sql`CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)`
  await sql`INSERT INTO accounts SELECT i, 100 FROM generate_series(1, 20) i`
})

afterAll(async () => {
  await sql?.end()
  await proxy?.close()
  await db?.drop()
})

describe('postgres.js through the proxy', () => {
  test('200 queries pipelined on one connection each get their own answer', async () => {
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) => sql`SELECT ${i}::int * 2 AS doubled`),
    )
    expect(answers.map(([row]) => row.doubled)).toEqual(
      Array.from({ length: 200 }, (_, i) => i * 2),
    )
    const [{ connections }] = await sql`
      SELECT count(*)::int AS connections FROM pg_stat_activity
      WHERE application_name = 'pgfence-e2e-postgres-js'`
    expect(connections).toBe(1)
  })

  test('a failing query among pipelined ones fails alone', async () => {
    const outcomes = await Promise.allSettled(
      [1, 2, 0, 4].map((divisor) => sql`SELECT 100 / ${divisor}::int AS quotient`),
    )
    expect(
      outcomes.map((outcome) =>
        outcome.status === 'fulfilled' ? outcome.value[0].quotient : outcome.reason.code,
      ),
    ).toEqual([100, 50, '22012', 25])
  })

  test('a transaction with parallel queries commits as one', async () => {
    await sql.begin((tx) =>
      Array.from(
        { length: 20 },
        (_, i) => tx`UPDATE accounts SET balance = balance + ${i} WHERE id = ${i + 1}`,
      ),
    )
    const [{ total }] = await sql`SELECT sum(balance)::int AS total FROM accounts`
    expect(total).toBe(20 * 100 + 190)
  })

  test('a failing transaction rolls back every statement in it', async () => {
    const before = await sql`SELECT id, balance FROM accounts ORDER BY id`
    const attempt = sql.begin(async (tx) => {
      await tx`UPDATE accounts SET balance = 0`
      await tx`INSERT INTO accounts VALUES (1, 1)`
    })
    await expect(attempt).rejects.toMatchObject({ code: '23505' })
    expect(await sql`SELECT id, balance FROM accounts ORDER BY id`).toEqual(before)
  })

  test('prepared statements are reused across executions', async () => {
    for (const id of [1, 2, 3]) {
      const [row] = await sql`SELECT id FROM accounts WHERE id = ${id} /* pgfence-e2e-prepared */`
      expect(row.id).toBe(id)
    }
    const prepared = await sql`
      SELECT count(*)::int AS statements FROM pg_prepared_statements
      WHERE statement LIKE '%pgfence-e2e-prepared%' AND NOT statement LIKE '%pg_prepared_statements%'`
    expect(prepared[0].statements).toBe(1)
  })

  test('query.cancel() sends a CancelRequest through the proxy and the query fails with 57014', async () => {
    const sleeping = sql`SELECT pg_sleep(30) /* pgfence-e2e-cancel */`
    const failure = sleeping.then(
      () => null,
      (error: unknown) => error,
    )
    await waitFor(async () => {
      const { rows } = await adminQuery(
        "SELECT 1 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(30) /* pgfence-e2e-cancel%' AND state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
      )
      return rows.length === 1
    })
    const started = Date.now()
    sleeping.cancel()
    expect(await failure).toMatchObject({ code: '57014' })
    expect(Date.now() - started).toBeLessThan(5000)
    const [row] = await sql`SELECT 1 AS still_usable`
    expect(row.still_usable).toBe(1)
  })
})
