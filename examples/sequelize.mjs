// Sequelize with a fenced table: `node examples/sequelize.mjs sync` creates the table straight
// in PostgreSQL, `pgfence migrate` fences it, `node examples/sequelize.mjs pay` writes through
// pgfence under a lease (Redis for the lease, PostgreSQL for its token).
//   DATABASE_URL=postgres://…:6432/app         the application's connection, through pgfence
//   DIRECT_DATABASE_URL=postgres://…:5432/app  PostgreSQL directly: sync() and the token source
import { DataTypes, Sequelize } from 'sequelize'
import { LeaseManager } from 'pgfence/lease'

const defineInvoice = (sequelize) =>
  sequelize.define(
    'Invoice',
    {
      id: { type: DataTypes.INTEGER, primaryKey: true },
      status: { type: DataTypes.TEXT, allowNull: false },
      fencing_token: { type: DataTypes.BIGINT }, // no defaultValue: Sequelize would write it (PF501)
    },
    { tableName: 'invoices' }, // without it the table is "Invoices": fence `name: Invoices`
  )

if (process.argv[2] === 'sync') {
  // A nullable fence column with no default: `pgfence migrate` makes it NOT NULL DEFAULT 0.
  const direct = new Sequelize(process.env.DIRECT_DATABASE_URL, { logging: false })
  defineInvoice(direct)
  await direct.sync()
  await direct.close()
} else {
  const sequelize = new Sequelize(process.env.DATABASE_URL, { logging: false })
  const Invoice = defineInvoice(sequelize)
  const leases = new LeaseManager({
    redis: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379',
    tokenSource: process.env.DIRECT_DATABASE_URL,
  })
  try {
    await leases.withLease('invoice:99', (lease) =>
      sequelize.transaction(async (transaction) => {
        await sequelize.query(lease.transactionSql(), { transaction }) // the lease's token, until COMMIT
        await Invoice.create({ id: 99, status: 'NEW' }, { transaction }) // fencing_token: the token
        await Invoice.update({ status: 'PAID' }, { where: { id: 99 }, transaction })
      }),
    )
    const invoice = await Invoice.findByPk(99)
    console.log(`invoice 99 ${invoice.status} with token ${invoice.fencing_token}`)
  } finally {
    await leases.close()
    await sequelize.close()
  }
}
