import { Kysely, PostgresDialect, sql, type Generated } from 'kysely'
import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { ormStack, rejection, type OrmStack } from './support.js'

interface Database {
  invoices: { id: number; status: string; fencing_token: Generated<string> }
}

let stack: OrmStack
let db: Kysely<Database>

beforeAll(async () => {
  stack = await ormStack(
    'kysely',
    'CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL)',
    'invoices',
  )
  db = new Kysely<Database>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: stack.url, max: 1 }) }),
  })
})

afterAll(async () => {
  await db?.destroy()
  await stack?.close()
})

test('insert, update and upsert with the token set for the transaction', async () => {
  const token = '101'
  await db.transaction().execute(async (trx) => {
    await sql`SELECT set_config('app.fencing_token', ${token}, true)`.execute(trx)
    await trx.insertInto('invoices').values({ id: 1, status: 'NEW' }).execute()
    await trx.updateTable('invoices').set({ status: 'SENT' }).where('id', '=', 1).execute()
    await trx
      .insertInto('invoices')
      .values({ id: 1, status: 'PAID' })
      .onConflict((oc) => oc.column('id').doUpdateSet({ status: 'PAID' }))
      .execute()
  })
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'PAID', fencing_token: '101' })
})

test('a comment token on one statement; a stale one is PF409 in err.code', async () => {
  const update = (status: string, token: string) =>
    db
      .updateTable('invoices')
      .set({ status })
      .where('id', '=', 1)
      .modifyEnd(sql.raw(`/*fencing_token='${token}'*/`))
      .execute()
  await update('VOID', '102')
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'VOID', fencing_token: '102' })
  const err = await rejection(update('LATE', '101'))
  expect(err.code).toBe('PF409')
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'VOID', fencing_token: '102' })
})
