import { readFileSync } from 'node:fs'
import pg from 'pg'
import { run as migrate } from '../../src/cli/migrate.js'
import { capture } from '../support/capture.js'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'

const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).pathname

/** The config the earlier schemas (fixtures/schema-N.sql) were installed with. */
export const previousConfig = fixture('previous.yaml')

/** The tables of previousConfig, before any fencing. */
export const previousTablesSql = `
CREATE TABLE invoices (id int PRIMARY KEY, status text);
CREATE SCHEMA billing;
CREATE TABLE billing."Ledger" (id int PRIMARY KEY, amount int);
CREATE TABLE payouts (id int PRIMARY KEY, note text);
`

/**
 * Installs an earlier pgfence schema exactly as its release did: version 1 (before schema
 * versions were recorded) unless told otherwise.
 */
export const installPreviousSchema = (client: pg.Client, version = 1): Promise<unknown> =>
  client.query(readFileSync(fixture(`schema-${version}.sql`), 'utf8'))

/** A database with previousConfig's tables and a maintenance session to it. */
export async function databaseWithTables(
  label: string,
): Promise<{ db: TestDatabase; admin: pg.Client }> {
  const db = await createTestDatabase(label)
  const admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query(previousTablesSql)
  return { db, admin }
}

/** `pgfence migrate` with previousConfig and these arguments, output captured. */
export const migrateWith = (url: string, ...args: string[]) =>
  capture(() => migrate(['--config', previousConfig, '--database-url', url, ...args]))

/** The comment that marks the schema's version (schema-version.ts). */
export const schemaComment = async (client: pg.Client): Promise<string | null> =>
  (await client.query("SELECT obj_description('pgfence'::regnamespace, 'pg_namespace') AS c"))
    .rows[0].c
