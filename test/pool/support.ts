import { adminQuery } from '../support/database.js'
export { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'

/** Client backends PostgreSQL runs for a database now. */
export async function backendsOf(database: string): Promise<number> {
  const { rows } = await adminQuery(
    `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = '${database}' AND backend_type = 'client backend'`,
  )
  return rows[0].n
}
