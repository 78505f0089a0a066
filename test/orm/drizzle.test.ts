import { eq, sql } from 'drizzle-orm'
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres'
import { bigint, integer, pgTable, text } from 'drizzle-orm/pg-core'
import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { ormStack, rejection, type OrmStack } from './support.js'

/** The fence column is declared with its default: Drizzle then inserts it as DEFAULT. */
const invoices = pgTable('invoices', {
  id: integer('id').primaryKey(),
  status: text('status').notNull(),
  fencingToken: bigint('fencing_token', { mode: 'bigint' }).notNull().default(0n),
})

let stack: OrmStack
let pool: pg.Pool
let db: NodePgDatabase

beforeAll(async () => {
  stack = await ormStack(
    'drizzle',
    'CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL)',
    'invoices',
  )
  pool = new pg.Pool({ connectionString: stack.url, max: 1 })
  db = drizzle({ client: pool })
})

afterAll(async () => {
  await pool?.end()
  await stack?.close()
})

test('insert, update and upsert with the token set for the transaction', async () => {
  const token = '101'
  await db.transaction(async (tx) => {
    await tx.execute(sql`SELECT set_config('app.fencing_token', ${token}, true)`)
    await tx.insert(invoices).values([
      { id: 1, status: 'NEW' },
      { id: 2, status: 'NEW' },
    ])
    await tx.update(invoices).set({ status: 'SENT' }).where(eq(invoices.id, 1))
    await tx
      .insert(invoices)
      .values({ id: 1, status: 'PAID' })
      .onConflictDoUpdate({ target: invoices.id, set: { status: 'PAID' } })
  })
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'PAID', fencing_token: '101' })
  expect(await stack.row('invoices', 2)).toMatchObject({ fencing_token: '101' })
})

test('a stale token is PF409 in err.cause.code, and changes nothing', async () => {
  const err = await rejection(
    db.transaction(async (tx) => {
      await tx.execute(sql`SELECT set_config('app.fencing_token', ${'100'}, true)`)
      await tx.update(invoices).set({ status: 'LATE' }).where(eq(invoices.id, 1))
    }),
  )
  expect(err.code).toBeUndefined()
  expect(err.cause?.code).toBe('PF409')
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'PAID', fencing_token: '101' })
})
