import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { pgBin, runCommand } from './support/commands.js'

let source: TestDatabase
let restored: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  source = await createTestDatabase('e2e_dump_source')
  restored = await createTestDatabase('e2e_dump_restored')
  proxy = await startTestProxy({}, source.url)
  const client = new pg.Client({ connectionString: source.url })
  await client.connect()
  await client.query(`
    CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL, fencing_token bigint NOT NULL DEFAULT 0);
    INSERT INTO invoices SELECT i, CASE WHEN i % 2 = 0 THEN 'PAID' ELSE 'PENDING' END, i FROM generate_series(1, 200) i;
    CREATE VIEW pending AS SELECT id FROM invoices WHERE status = 'PENDING';
    CREATE FUNCTION invoice_count() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM invoices';
  `)
  await client.end()
})

afterAll(async () => {
  await proxy?.close()
  await source?.drop()
  await restored?.drop()
})

const pgDump = (url: string) => runCommand(pgBin('pg_dump'), ['--no-sync', '-d', url])

/** Recent pg_dump versions fence the script with a random \restrict key on every run. */
const withoutRestrictKey = (dump: string): string =>
  dump.replace(/^\\(un)?restrict \S+$/gm, '\\$1restrict KEY')

test('pg_dump through the proxy produces the same dump as straight from PostgreSQL', async () => {
  const direct = await pgDump(source.url)
  const proxied = await pgDump(proxy.url())
  expect(proxied.stderr).toBe('')
  expect(proxied.code).toBe(0)
  expect(proxied.stdout).toContain('CREATE TABLE public.invoices')
  expect(proxied.stdout).toContain('200\tPAID\t200')
  expect(withoutRestrictKey(proxied.stdout)).toBe(withoutRestrictKey(direct.stdout))
})

test('the dump restores through the proxy with psql', async () => {
  const dump = await pgDump(proxy.url())
  const restoreUrl = proxy.url(undefined, restored.name)
  const restore = await runCommand(
    pgBin('psql'),
    ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', restoreUrl],
    {
      input: dump.stdout,
    },
  )
  expect(restore.stderr).toBe('')
  expect(restore.code).toBe(0)
  const count = await runCommand(pgBin('psql'), [
    '-X',
    '-At',
    '-d',
    restoreUrl,
    '-c',
    'SELECT invoice_count()',
  ])
  expect(count.stdout).toBe('200\n')
})
