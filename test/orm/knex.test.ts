import knex, { type Knex } from 'knex'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { ormStack, rejection, type OrmStack } from './support.js'

let stack: OrmStack
let db: Knex

beforeAll(async () => {
  stack = await ormStack(
    'knex',
    'CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL)',
    'invoices',
  )
  db = knex({ client: 'pg', connection: stack.url, pool: { min: 0, max: 1 } })
})

afterAll(async () => {
  await db?.destroy()
  await stack?.close()
})

test('insert, update and upsert with the token set for the transaction', async () => {
  const token = '101'
  await db.transaction(async (trx) => {
    await trx.raw("SELECT set_config('app.fencing_token', ?, true)", [token])
    await trx('invoices').insert({ id: 1, status: 'NEW' })
    await trx('invoices').where({ id: 1 }).update({ status: 'SENT' })
    await trx('invoices').insert({ id: 1, status: 'PAID' }).onConflict('id').merge(['status'])
  })
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'PAID', fencing_token: '101' })
})

/** knex adds comments to SELECTs only: a write gets its comment through raw. */
const withComment = (query: Knex.QueryBuilder, token: string) => {
  const { sql, bindings } = query.toSQL()
  return db.raw(`${sql} /*fencing_token='${token}'*/`, bindings)
}

test('a comment token on one statement; a stale one is PF409 in err.code', async () => {
  await withComment(db('invoices').where({ id: 1 }).update({ status: 'VOID' }), '102')
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'VOID', fencing_token: '102' })
  const stale = withComment(db('invoices').where({ id: 1 }).update({ status: 'LATE' }), '101')
  const err = await rejection(stale)
  expect(err.code).toBe('PF409')
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'VOID', fencing_token: '102' })
})

test('the pool hazard: a session SET stays on the connection for the next borrower', async () => {
  const token = "SELECT current_setting('app.fencing_token', true) AS token"
  await db.raw('SET app.fencing_token = 102')
  expect((await db.raw(token)).rows).toEqual([{ token: '102' }])
  await db.raw('RESET app.fencing_token')
  await db.transaction(async (trx) => {
    await trx.raw("SELECT set_config('app.fencing_token', ?, true)", ['102'])
  })
  expect((await db.raw(token)).rows).toEqual([{ token: '' }])
})
