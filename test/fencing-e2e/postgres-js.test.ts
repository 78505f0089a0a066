import postgres from 'postgres'
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest'
import { createTestDatabase } from '../support/database.js'
import { literal, parameterised, presentToken, runGcPauseScenario } from './scenario.js'
import { sqlstateOf, startFencedStack, type FencedStack, type Outcome } from './support.js'

let stack: FencedStack
let sql: postgres.Sql

/** The outcome of a postgres.js query. */
async function outcome(query: Promise<postgres.RowList<postgres.Row[]>>): Promise<Outcome> {
  try {
    return { code: 'ok', rowCount: (await query).count }
  } catch (err) {
    if (!(err instanceof postgres.PostgresError)) throw err
    const { code, detail, hint, schema_name, table_name, column_name } = err
    return { code, detail, hint, schema: schema_name, table: table_name, column: column_name }
  }
}

beforeAll(async () => {
  stack = await startFencedStack(await createTestDatabase('fencing_e2e_postgres_js'))
  // One connection: session tokens hold for every query, and concurrent queries are pipelined.
  sql = postgres(stack.url, { max: 1, onnotice: () => {} })
})

afterAll(async () => {
  await sql?.end()
  await stack?.close()
})

beforeEach(async () => {
  await sql`RESET ALL`
  await stack.seed(99)
})

describe('the GC-pause story with postgres.js', () => {
  test('prepared statements (the default)', async () => {
    await runGcPauseScenario(stack, async (token, write) => {
      await sql.unsafe(presentToken(token))
      return outcome(
        write.kind === 'update'
          ? sql`UPDATE invoices SET status = ${write.status} WHERE id = ${99}`
          : sql`DELETE FROM invoices WHERE id = ${99}`,
      )
    })
  })

  test('unsafe with parameters, prepared', async () => {
    await runGcPauseScenario(stack, async (token, write) => {
      await sql.unsafe(presentToken(token))
      const { text, values } = parameterised(write)
      return outcome(
        sql.unsafe(text, values as postgres.ParameterOrJSON<never>[], { prepare: true }),
      )
    })
  })

  test('unsafe simple queries', async () => {
    await runGcPauseScenario(stack, async (token, write) => {
      await sql.unsafe(presentToken(token))
      return outcome(sql.unsafe(literal(write)).simple())
    })
  })
})

test('a prepared statement first run under 999 runs under 1001 after SET', async () => {
  const update = (status: string) => sql`UPDATE invoices SET status = ${status} WHERE id = ${99}`
  await sql`SET app.fencing_token = 999`
  for (let run = 0; run < 7; run++) expect((await update(`RUN ${run}`)).count).toBe(1)
  expect(await stack.invoice(99)).toEqual({ status: 'RUN 6', fencing_token: '999' })
  await sql`SET app.fencing_token = 1001`
  await update('AT 1001')
  expect(await stack.invoice(99)).toEqual({ status: 'AT 1001', fencing_token: '1001' })
  await sql`SET app.fencing_token = 999`
  expect(await sqlstateOf(update('BACK AT 999'))).toBe('PF409')
  expect(await stack.invoice(99)).toEqual({ status: 'AT 1001', fencing_token: '1001' })
})

describe('comment tokens', () => {
  test('a leading sqlcommenter comment, prepared, overrides the session token', async () => {
    await sql`SET app.fencing_token = 5000`
    await sql`/*route='/pay',fencing_token='160'*/ UPDATE invoices SET status = ${'LEADING'} WHERE id = ${99}`
    expect(await stack.invoice(99)).toEqual({ status: 'LEADING', fencing_token: '160' })
  })

  test('a trailing comment, simple protocol', async () => {
    await sql
      .unsafe("UPDATE invoices SET status = 'TRAILING' WHERE id = 99 /* fencing_token=161 */")
      .simple()
    expect(await stack.invoice(99)).toEqual({ status: 'TRAILING', fencing_token: '161' })
    const stale = sql
      .unsafe("UPDATE invoices SET status = 'STALE' WHERE id = 99 /* fencing_token=160 */")
      .simple()
    expect(await sqlstateOf(stale)).toBe('PF409')
  })

  test('tokens beyond 2^53 are compared exactly', async () => {
    await stack.seed(99, '9007199254740993')
    const stale = sql`/*fencing_token='9007199254740992'*/ UPDATE invoices SET status = ${'BELOW'} WHERE id = ${99}`
    expect(await sqlstateOf(stale)).toBe('PF409')
    await sql`/*fencing_token='9007199254740994'*/ UPDATE invoices SET status = ${'ABOVE'} WHERE id = ${99}`
    expect(await stack.invoice(99)).toEqual({ status: 'ABOVE', fencing_token: '9007199254740994' })
  })
})

test('pipelined fenced writes and reads on one connection answer in order', async () => {
  const ids = Array.from({ length: 60 }, (_, i) => 1000 + i)
  // Every third row is ahead of the writer's token, so its write must be refused.
  for (const id of ids) await stack.seed(id, id % 3 === 0 ? '300' : '100')
  await sql`SET app.fencing_token = 200`
  const inFlight = ids.flatMap((id) => [
    sql`UPDATE invoices SET amount = ${id} WHERE id = ${id} RETURNING id, amount`,
    sql`SELECT id, amount, fencing_token FROM invoices WHERE id = ${id}`,
  ])
  const settled = await Promise.allSettled(inFlight)
  ids.forEach((id, i) => {
    const [write, read] = [settled[2 * i]!, settled[2 * i + 1]!]
    if (id % 3 === 0) {
      expect(write).toMatchObject({ status: 'rejected', reason: { code: 'PF409' } })
      expect(read).toMatchObject({
        status: 'fulfilled',
        value: [{ id, amount: 0, fencing_token: '300' }],
      })
    } else {
      expect(write).toMatchObject({ status: 'fulfilled', value: [{ id, amount: id }] })
      expect(read).toMatchObject({
        status: 'fulfilled',
        value: [{ id, amount: id, fencing_token: '200' }],
      })
    }
  })
})
