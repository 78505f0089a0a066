import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import {
  adminQuery,
  createTestDatabase,
  maintenanceSession,
  type TestDatabase,
} from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { fencingConfig, installFencing, sqlstateOf } from './support.js'

// Every way a write can reach a fenced table's row, through pgfence and around it.
const fencedTables = [
  { name: 'invoices' },
  { name: 'orders' },
  { name: 'shipments_eu' },
  { name: 'items' },
]
const fencing = fencingConfig({
  tables: fencedTables.map((t) => ({ ...t, column: 'fencing_token', requireToken: true })),
})

const schemaSql = `
CREATE TABLE invoices (id int PRIMARY KEY, region text NOT NULL DEFAULT 'eu', status text NOT NULL);
CREATE TABLE orders (id int, region text NOT NULL, status text NOT NULL) PARTITION BY LIST (region);
CREATE TABLE orders_eu PARTITION OF orders FOR VALUES IN ('eu');
CREATE TABLE shipments (id int, region text NOT NULL, status text NOT NULL, fencing_token bigint NOT NULL DEFAULT 0) PARTITION BY LIST (region);
CREATE TABLE shipments_eu PARTITION OF shipments FOR VALUES IN ('eu');
CREATE TABLE items (id int, region text NOT NULL DEFAULT 'eu', status text NOT NULL);
CREATE TABLE items_child () INHERITS (items);
CREATE VIEW invoices_v AS SELECT id, status FROM invoices;
CREATE VIEW invoices_iv AS SELECT id, status, region FROM invoices WHERE region <> '';
CREATE FUNCTION invoices_iv_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE invoices SET status = NEW.status WHERE id = OLD.id; RETURN NEW; END $$;
CREATE TRIGGER invoices_iv_update INSTEAD OF UPDATE ON invoices_iv
  FOR EACH ROW EXECUTE FUNCTION invoices_iv_update();
CREATE FUNCTION set_status_sql(i int, s text) RETURNS void LANGUAGE sql AS
  $$ UPDATE invoices SET status = s WHERE id = i $$;
CREATE FUNCTION set_status_plpgsql(i int, s text) RETURNS void LANGUAGE plpgsql AS
  $$ BEGIN UPDATE invoices SET status = s WHERE id = i; END $$;
CREATE PROCEDURE set_status_proc(i int, s text) LANGUAGE plpgsql AS
  $$ BEGIN UPDATE invoices SET status = s WHERE id = i; END $$;
CREATE TABLE payments (invoice_id int, status text);
CREATE FUNCTION payments_pay() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN UPDATE invoices SET status = NEW.status WHERE id = NEW.invoice_id; RETURN NEW; END $$;
CREATE TRIGGER payments_pay AFTER INSERT ON payments FOR EACH ROW EXECUTE FUNCTION payments_pay();
CREATE TABLE notes (invoice_id int, status text);
CREATE RULE notes_status AS ON INSERT TO notes
  DO ALSO UPDATE invoices SET status = NEW.status WHERE id = NEW.invoice_id;
`
// After migrate: a partition that did not exist when it ran.
const laterPartitionSql = `CREATE TABLE orders_us PARTITION OF orders FOR VALUES IN ('us')`

interface Path {
  name: string
  /** Where row 99 lives, and its partition key. */
  table: string
  region: string
  write: (status: string) => string
}

const viaInvoices = (name: string, write: Path['write']): Path => ({
  name,
  table: 'invoices',
  region: 'eu',
  write,
})

const paths: Path[] = [
  {
    name: 'partition of a fenced partitioned table',
    table: 'orders_eu',
    region: 'eu',
    write: (s) => `UPDATE orders_eu SET status = '${s}' WHERE id = 99`,
  },
  {
    name: 'partition created after migrate',
    table: 'orders_us',
    region: 'us',
    write: (s) => `UPDATE orders_us SET status = '${s}' WHERE id = 99`,
  },
  {
    name: 'fenced partition written through its parent',
    table: 'shipments_eu',
    region: 'eu',
    write: (s) => `UPDATE shipments SET status = '${s}' WHERE id = 99`,
  },
  {
    name: 'inheritance child',
    table: 'items_child',
    region: 'eu',
    write: (s) => `UPDATE items_child SET status = '${s}' WHERE id = 99`,
  },
  viaInvoices('updatable view', (s) => `UPDATE invoices_v SET status = '${s}' WHERE id = 99`),
  viaInvoices('INSTEAD OF view', (s) => `UPDATE invoices_iv SET status = '${s}' WHERE id = 99`),
  viaInvoices('SQL function', (s) => `SELECT set_status_sql(99, '${s}')`),
  viaInvoices('PL/pgSQL function', (s) => `SELECT set_status_plpgsql(99, '${s}')`),
  viaInvoices('procedure', (s) => `CALL set_status_proc(99, '${s}')`),
  viaInvoices(
    'trigger of another table',
    (s) => `INSERT INTO payments (invoice_id, status) VALUES (99, '${s}')`,
  ),
  viaInvoices(
    'rule of another table',
    (s) => `INSERT INTO notes (invoice_id, status) VALUES (99, '${s}')`,
  ),
]

let db: TestDatabase
let proxy: TestProxy
let admin: pg.Client
const suffix = randomBytes(4).toString('hex')
const plainRole = `pgfence_paths_plain_${suffix}`
const memberRole = `pgfence_paths_member_${suffix}`
const sessions = new Map<string, pg.Client>()

/** One connection per (route, role), opened on first use. */
async function session(route: 'proxy' | 'direct', role = 'postgres'): Promise<pg.Client> {
  const key = `${route}:${role}`
  let client = sessions.get(key)
  if (client === undefined) {
    const url = new URL(db.url)
    if (route === 'proxy') url.port = String(proxy.port)
    url.username = role
    client = new pg.Client({ connectionString: url.toString() })
    await client.connect()
    sessions.set(key, client)
  }
  await client.query('ROLLBACK; RESET ALL')
  return client
}

beforeAll(async () => {
  db = await createTestDatabase('fence_paths')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query(schemaSql)
  // Twice: migrate is idempotent, and a configured partition is not an error.
  await installFencing(db.url, fencing)
  await installFencing(db.url, fencing)
  await admin.query(laterPartitionSql)
  await admin.query(`
    CREATE ROLE ${plainRole} LOGIN; CREATE ROLE ${memberRole} LOGIN;
    GRANT pgfence_maintenance TO ${memberRole};
    GRANT ALL ON ALL TABLES IN SCHEMA public TO ${plainRole}, ${memberRole};`)
  proxy = await startTestProxy({ fencing: { tables: fencedTables } })
})

afterAll(async () => {
  await Promise.all([...sessions.values()].map((c) => c.end().catch(() => undefined)))
  await proxy?.close()
  await admin?.end()
  await db?.drop()
  await adminQuery(`DROP ROLE IF EXISTS ${plainRole}, ${memberRole}`)
})

async function seed(path: Path): Promise<void> {
  await admin.query(`DELETE FROM ${path.table} WHERE id = 99`)
  await admin.query(
    `INSERT INTO ${path.table} (id, region, status, fencing_token) VALUES (99, $1, 'PENDING', 100)`,
    [path.region],
  )
}

const row99 = async (path: Path) =>
  (await admin.query(`SELECT status, fencing_token FROM ${path.table} WHERE id = 99`)).rows[0]

interface Case {
  name: string
  route: 'proxy' | 'direct'
  role?: () => string
  setup?: string
  comment?: string
  expected: string
  /** The row's fence after a write that commits. */
  fence?: string
}

const rejections: Case[] = [
  {
    name: 'stale SET through pgfence',
    route: 'proxy',
    setup: 'SET app.fencing_token = 50',
    expected: 'PF409',
  },
  {
    name: 'stale comment token through pgfence',
    route: 'proxy',
    comment: "/*fencing_token='50'*/ ",
    expected: 'PF409',
  },
  { name: 'no token through pgfence', route: 'proxy', expected: 'PF428' },
  {
    name: 'stale SET on a direct connection',
    route: 'direct',
    setup: 'SET app.fencing_token = 50',
    expected: 'PF409',
  },
  { name: 'no token on a direct connection', route: 'direct', expected: 'PF428' },
  {
    name: 'maintenance for an ordinary role',
    route: 'proxy',
    role: () => plainRole,
    setup: 'SET pgfence.maintenance = on',
    expected: '42501',
  },
]

const commits: Case[] = [
  {
    name: 'fresh SET through pgfence',
    route: 'proxy',
    setup: 'SET app.fencing_token = 101',
    expected: 'ok',
    fence: '101',
  },
  {
    name: 'fresh comment token through pgfence',
    route: 'proxy',
    comment: "/*fencing_token='102'*/ ",
    expected: 'ok',
    fence: '102',
  },
  {
    name: 'fresh SET on a direct connection',
    route: 'direct',
    setup: 'SET app.fencing_token = 103',
    expected: 'ok',
    fence: '103',
  },
  {
    name: 'maintenance for a superuser',
    route: 'proxy',
    setup: 'SET pgfence.maintenance = on',
    expected: 'ok',
    fence: '100',
  },
  {
    name: 'maintenance for a member of pgfence_maintenance',
    route: 'proxy',
    role: () => memberRole,
    setup: 'SET pgfence.maintenance = on',
    expected: 'ok',
    fence: '100',
  },
]

async function run(path: Path, c: Case, status: string): Promise<string> {
  await seed(path)
  const client = await session(c.route, c.role?.())
  if (c.setup) await client.query(c.setup)
  return sqlstateOf(client.query(`${c.comment ?? ''}${path.write(status)}`))
}

describe.each(paths)('$name', (path) => {
  test.each(rejections)('$name → $expected, row unchanged', async (c) => {
    expect(await run(path, c, 'LATE')).toBe(c.expected)
    expect(await row99(path)).toEqual({ status: 'PENDING', fencing_token: '100' })
  })

  test.each(commits)('$name commits', async (c) => {
    expect(await run(path, c, 'PAID')).toBe('ok')
    expect(await row99(path)).toEqual({ status: 'PAID', fencing_token: c.fence })
  })
})

describe('writes on a direct connection that no proxy sees', () => {
  const psql = (input: string, ...commands: string[]) =>
    runCommand(
      pgBin('psql'),
      [
        db.url,
        '-X',
        '-v',
        'ON_ERROR_STOP=1',
        '-v',
        'VERBOSITY=verbose',
        ...commands.flatMap((c) => ['-c', c]),
      ],
      { input },
    )
  const invoices = paths.find((p) => p.name === 'SQL function')!

  test('COPY FROM: no token is PF428, a token stamps the rows', async () => {
    const copy = 'COPY invoices (id, status) FROM STDIN'
    const refused = await psql('500\tNEW\n', copy)
    expect(refused.stderr).toMatch(/ERROR: {2}PF428/)
    const fenced = await psql('500\tNEW\n', 'SET app.fencing_token = 104', copy)
    expect(fenced.code).toBe(0)
    const row = await admin.query('SELECT fencing_token FROM invoices WHERE id = 500')
    expect(row.rows).toEqual([{ fencing_token: '104' }])
  })

  test('a DO block with a stale token is PF409', async () => {
    await seed(invoices)
    const block = "DO $$BEGIN UPDATE invoices SET status = 'LATE' WHERE id = 99; END$$"
    const stale = await psql('', 'SET app.fencing_token = 50', block)
    expect(stale.stderr).toMatch(/ERROR: {2}PF409/)
    expect(await row99(invoices)).toEqual({ status: 'PENDING', fencing_token: '100' })
  })

  test('TRUNCATE is PF501 unless maintenance is on', async () => {
    expect(await sqlstateOf((await session('direct')).query('TRUNCATE orders'))).toBe('PF501')
    const client = await session('direct')
    await client.query('SET pgfence.maintenance = on')
    expect(await sqlstateOf(client.query('TRUNCATE items_child'))).toBe('ok')
  })
})
