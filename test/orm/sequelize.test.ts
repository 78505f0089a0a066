import { DataTypes, Sequelize, type Model, type ModelStatic } from 'sequelize'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { ormStack, rejection, type OrmStack } from './support.js'

let stack: OrmStack
let sequelize: Sequelize
let Invoice: ModelStatic<Model>

/**
 * Sequelize's default table for model Invoice is "Invoices": the config says `name: Invoices`.
 * The fence column is declared with no defaultValue (Sequelize would write that value, and a
 * write to the fence column is PF501); `sync()` creates it nullable with no default, and
 * `pgfence migrate` then makes it NOT NULL DEFAULT 0.
 */
const define = (s: Sequelize) =>
  s.define('Invoice', {
    id: { type: DataTypes.INTEGER, primaryKey: true },
    status: { type: DataTypes.TEXT, allowNull: false },
    fencing_token: { type: DataTypes.BIGINT },
  })

beforeAll(async () => {
  stack = await ormStack(
    'sequelize',
    async (directUrl) => {
      const direct = new Sequelize(directUrl, { logging: false })
      await define(direct).sync()
      await direct.close()
    },
    'Invoices',
  )
  sequelize = new Sequelize(stack.url, { logging: false, pool: { max: 1 } })
  Invoice = define(sequelize)
})

afterAll(async () => {
  await sequelize?.close()
  await stack?.close()
})

test('create, update and upsert with the token set for the transaction', async () => {
  const t = '101'
  await sequelize.transaction(async (transaction) => {
    await sequelize.query("SELECT set_config('app.fencing_token', :t, true)", {
      replacements: { t },
      transaction,
    })
    const invoice = await Invoice.create({ id: 1, status: 'NEW' }, { transaction })
    await invoice.update({ status: 'SENT' }, { transaction })
    await Invoice.upsert({ id: 1, status: 'PAID' }, { transaction })
  })
  expect(await stack.row('Invoices', 1)).toMatchObject({ status: 'PAID', fencing_token: '101' })
})

test('a stale token is PF409 in err.parent.code, and changes nothing', async () => {
  const err = await rejection(
    sequelize.transaction(async (transaction) => {
      await sequelize.query("SELECT set_config('app.fencing_token', '100', true)", { transaction })
      await Invoice.update({ status: 'LATE' }, { where: { id: 1 }, transaction })
    }),
  )
  expect(err.name).toBe('SequelizeDatabaseError')
  expect(err.parent?.code).toBe('PF409')
  expect(err.original?.code).toBe('PF409')
  expect(await stack.row('Invoices', 1)).toMatchObject({ status: 'PAID', fencing_token: '101' })
})
