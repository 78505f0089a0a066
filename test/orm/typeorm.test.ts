import { DataSource, EntitySchema } from 'typeorm'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { ormStack, rejection, type OrmStack } from './support.js'

interface Invoice {
  id: number
  status: string
  fencing_token?: string
}

/** The fence column is declared with its default: TypeORM then inserts it as DEFAULT. */
const Invoices = new EntitySchema<Invoice>({
  name: 'Invoice',
  tableName: 'invoices',
  columns: {
    id: { type: Number, primary: true },
    status: { type: String },
    fencing_token: { type: 'bigint', default: 0 },
  },
})

let stack: OrmStack
let dataSource: DataSource

const connect = (url: string, synchronize = false) =>
  new DataSource({ type: 'postgres', url, entities: [Invoices], synchronize, poolSize: 1 })

beforeAll(async () => {
  stack = await ormStack(
    'typeorm',
    async (directUrl) => void (await (await connect(directUrl, true).initialize()).destroy()),
    'invoices',
  )
  dataSource = await connect(stack.url).initialize()
})

afterAll(async () => {
  await dataSource?.destroy()
  await stack?.close()
})

test('save, update and upsert with the token set for the transaction', async () => {
  const token = '101'
  await dataSource.transaction(async (manager) => {
    await manager.query("SELECT set_config('app.fencing_token', $1, true)", [token])
    const repo = manager.getRepository(Invoices)
    await repo.save({ id: 1, status: 'NEW' })
    await repo.update({ id: 1 }, { status: 'SENT' })
    await repo.upsert({ id: 1, status: 'PAID' }, ['id'])
    await repo.insert([
      { id: 2, status: 'NEW' },
      { id: 3, status: 'NEW' },
    ])
  })
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'PAID', fencing_token: '101' })
  expect(await stack.row('invoices', 3)).toMatchObject({ fencing_token: '101' })
})

test('a stale token is PF409 in err.code (and err.driverError.code), and changes nothing', async () => {
  const err = await rejection(
    dataSource.transaction(async (manager) => {
      await manager.query("SELECT set_config('app.fencing_token', $1, true)", ['100'])
      await manager.getRepository(Invoices).update({ id: 1 }, { status: 'LATE' })
    }),
  )
  expect(err.name).toBe('QueryFailedError')
  expect(err.code).toBe('PF409')
  expect(err.driverError?.code).toBe('PF409')
  expect(await stack.row('invoices', 1)).toMatchObject({ status: 'PAID', fencing_token: '101' })
})

test("TypeORM's comment() quotes a word that is a column name: the fence column's key is lost", () => {
  const query = dataSource
    .createQueryBuilder()
    .update(Invoices)
    .set({ status: 'VOID' })
    .where('id = :id', { id: 1 })
    .comment('fencing_token=102')
    .getQuery()
  expect(query).toMatch(/^\/\* "fencing_token"=102 \*\/ UPDATE/)
})
