import { sqlFile } from './sql-file.js'

/** The postgres lease store's table (sql/lease-table.sql; src/lease/postgres-lease-store.ts). */
export const leaseTableSql = sqlFile('lease-table')
