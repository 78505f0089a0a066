import net from 'node:net'
import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { stringify } from 'yaml'
import { capturingLogger } from '../fencing-e2e/support.js'
import { fencingConfig, installFencing, sqlstateOf } from '../fence/support.js'
import { waitFor } from '../e2e/support/wait.js'
import { keepaliveTimers } from '../support/keepalive-timers.js'
import {
  createTestDatabase,
  maintenanceSession,
  queryOnce,
  type TestDatabase,
} from '../support/database.js'
import { POOL_PASSWORD, scratchFile, writeUserlist } from '../support/pool-auth.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'

// A reload puts each key in force or says that it needs a restart, and SHOW CONFIG shows what
// is in force: the pools, the token settings of transaction pooling and the logs follow.

let db: TestDatabase

beforeAll(async () => {
  db = await createTestDatabase('admin_reload')
  await queryOnce(db.url, 'CREATE TABLE ledger (id int PRIMARY KEY, note text)')
  // Migrated for the token setting that the reloads below switch to.
  await installFencing(
    db.url,
    fencingConfig({ setting: 'app.ledger_token', tables: [{ name: 'ledger' }] }),
  )
  const admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query("INSERT INTO ledger VALUES (1, 'new')")
  await admin.end()
})

afterAll(async () => {
  await db?.drop()
})

/** A proxy started from `config`, which reload() reads again from its file after `rewrite`. */
async function startReloadable(config: ConfigOverrides, logs: Record<string, unknown>[]) {
  const file = scratchFile('pgfence.yaml')
  const upstream = new URL(db.url)
  const full = (overrides: ConfigOverrides): ConfigOverrides => ({
    listen: { host: '127.0.0.1', port: 0 },
    upstream: { host: upstream.hostname, port: Number(upstream.port) },
    limits: { shutdownTimeoutMs: 2000 },
    log: { level: 'info' },
    auth: { file: writeUserlist() },
    admin: { users: ['postgres'] },
    ...overrides,
  })
  const write = (overrides: ConfigOverrides) => writeFileSync(file, stringify(full(overrides)))
  write(config)
  const proxy = await startTestProxy(full(config), db.url, {
    configFile: file,
    logger: capturingLogger(logs),
  })
  return {
    proxy,
    async reload(overrides: ConfigOverrides) {
      write(overrides)
      await proxy.reload()
    },
  }
}

async function connect(proxy: TestProxy): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: proxy.url('postgres', db.name, POOL_PASSWORD) })
  client.on('error', () => {})
  await client.connect()
  return client
}

/** The console logs in as a pooled client does: with the userlist's password. */
async function consoleRows(proxy: TestProxy, command: string, password = POOL_PASSWORD) {
  const console = new pg.Client({ connectionString: proxy.url('postgres', 'pgfence', password) })
  await console.connect()
  try {
    return (await console.query<Record<string, string>>(command)).rows
  } finally {
    await console.end()
  }
}

async function pool(proxy: TestProxy): Promise<Record<string, string>> {
  const rows = await consoleRows(proxy, 'SHOW POOLS')
  return rows.find((row) => row.database === db.name)!
}

async function showConfig(proxy: TestProxy, password?: string): Promise<Map<string, string>> {
  const rows = await consoleRows(proxy, 'SHOW CONFIG', password)
  return new Map(rows.map((row) => [row.key!, row.value!]))
}

describe('a session pool of 3 reloaded to 1, then to 2', () => {
  const logs: Record<string, unknown>[] = []
  let proxy: TestProxy
  let reload: (overrides: ConfigOverrides) => Promise<void>
  const clients: pg.Client[] = []
  /** The most server connections lent at once that SHOW POOLS reported after the shrink. */
  let mostActive = 0
  const watch = async (proxy: TestProxy) => {
    const row = await pool(proxy)
    mostActive = Math.max(mostActive, Number(row.sv_active))
    return row
  }

  beforeAll(async () => {
    ;({ proxy, reload } = await startReloadable({ pool: { mode: 'session', size: 3 } }, logs))
  })

  afterAll(async () => {
    await Promise.all(clients.map((client) => client.end().catch(() => {})))
    await proxy?.close()
  })

  test('idle connections beyond the new size close; no more than one is lent', async () => {
    const [held, ...leaving] = await Promise.all([1, 2, 3].map(() => connect(proxy)))
    clients.push(held!)
    expect(await pool(proxy)).toMatchObject({ sv_active: '3', sv_idle: '0' })
    await Promise.all(leaving.map((client) => client.end()))
    await waitFor(async () => (await pool(proxy)).sv_idle === '2', { what: 'two idle' })

    await reload({
      pool: { mode: 'transaction', size: 1 },
      tcpKeepalive: { idleMs: 60000 },
      fencing: { setting: 'app.ledger_token' },
    })
    expect(await watch(proxy)).toMatchObject({ sv_active: '1', sv_idle: '0' })

    // The pool is full: a new client waits for the connection the first one holds.
    const waiting = connect(proxy)
    await waitFor(async () => (await watch(proxy)).cl_waiting === '1', { what: 'a waiter' })
    await held!.end()
    const next = await waiting
    clients.push(next)
    expect(await sqlstateOf(next.query('SELECT 1'))).toBe('ok')
    expect(await watch(proxy)).toMatchObject({ sv_active: '1', cl_waiting: '0' })
    expect(mostActive).toBe(1)
  })

  test('a client accepted after the reload gets the new keepalive idle time', async () => {
    const socket = net.connect(proxy.port, '127.0.0.1')
    await once(socket, 'connect')
    // A first byte: the kernel hands the proxy a connection once it has sent something.
    socket.write(Buffer.alloc(1))
    const filter = `sport = :${proxy.port} and dport = :${socket.localPort}`
    let timers: (number | null)[] = []
    await waitFor(() => (timers = keepaliveTimers(filter)).length === 1 && timers[0] !== null, {
      what: "the proxy's keepalive timer on the client",
    })
    socket.destroy()
    // 30 s before the reload (the default), 60 s after.
    expect(timers[0]!).toBeGreaterThan(30)
    expect(timers[0]!).toBeLessThanOrEqual(60)
  })

  test('SHOW CONFIG shows the values in force; the kept pool.mode is logged by name', async () => {
    const config = await showConfig(proxy)
    expect(config.get('pool.size')).toBe('1')
    expect(config.get('tcpKeepalive.idleMs')).toBe('60000')
    expect(config.get('fencing.setting')).toBe('app.ledger_token')
    expect(config.get('pool.mode')).toBe('session')
    const restart = logs.filter((r) => r.level === 40 && typeof r.key === 'string')
    expect(restart).toEqual([
      expect.objectContaining({
        key: 'pool.mode',
        running: 'session',
        file: 'transaction',
        msg: 'configuration reload: pool.mode needs a restart; its running value stays in force',
      }),
    ])
    expect(logs.filter((r) => r.msg === 'configuration reloaded')).toEqual([
      expect.objectContaining({ needRestart: ['pool.mode'] }),
    ])
  })

  test('a larger pool lends to a waiting client at once', async () => {
    const waiting = connect(proxy)
    await waitFor(async () => (await pool(proxy)).cl_waiting === '1', { what: 'a waiter' })
    await reload({ pool: { mode: 'session', size: 2 } })
    const next = await waiting
    clients.push(next)
    // Greeted from the pool first, it is lent its connection right after: its query runs there.
    expect(await sqlstateOf(next.query('SELECT 1'))).toBe('ok')
    expect(await pool(proxy)).toMatchObject({ sv_active: '2', cl_waiting: '0' })
  })
})

describe('a transaction pool whose token setting a reload changes', () => {
  const logs: Record<string, unknown>[] = []
  let proxy: TestProxy
  let reload: (overrides: ConfigOverrides) => Promise<void>
  let client: pg.Client

  beforeAll(async () => {
    ;({ proxy, reload } = await startReloadable(
      { pool: { mode: 'transaction', size: 2 }, fencing: { tables: [{ name: 'ledger' }] } },
      logs,
    ))
    client = await connect(proxy)
  })

  afterAll(async () => {
    await client?.end()
    await proxy?.close()
  })

  test('the new setting follows the session from one server connection to the next', async () => {
    await reload({
      pool: { mode: 'transaction', size: 2 },
      fencing: { setting: 'app.ledger_token', tables: [{ name: 'ledger' }] },
    })
    // Its own transaction: the server connection is reset after it and the value replayed.
    await client.query("SET app.ledger_token = '5'")
    expect(await sqlstateOf(client.query("UPDATE ledger SET note = 'x' WHERE id = 1"))).toBe('ok')
    const { rows } = await queryOnce(db.url, 'SELECT fencing_token FROM ledger WHERE id = 1')
    expect(rows).toEqual([{ fencing_token: '5' }])
  })

  test('a rule that needs migrate is logged as such, and nothing says other paths are unfenced', async () => {
    await reload({
      pool: { mode: 'transaction', size: 2 },
      fencing: { setting: 'app.ledger_token', tables: [{ name: 'ledger', requireToken: false }] },
    })
    // The database is checked again at the next login after a reload.
    const other = await connect(proxy)
    const message =
      'fencing rule for "ledger" changed (requireToken: false): run `pgfence migrate` to apply it to the database\'s triggers; until then the installed triggers keep the old rule'
    try {
      await waitFor(() => logs.some((r) => r.msg === message), { what: 'the rule logged' })
      // The installed trigger still requires a token: the write is refused as before.
      expect(await sqlstateOf(other.query("UPDATE ledger SET note = 'y' WHERE id = 1"))).toBe(
        'PF428',
      )
    } finally {
      await other.end()
    }
    expect(logs.filter((r) => String(r.msg).includes('not fenced'))).toEqual([])
  })
})

describe('auth.file', () => {
  const logs: Record<string, unknown>[] = []
  let proxy: TestProxy
  let reload: (overrides: ConfigOverrides) => Promise<void>

  beforeAll(async () => {
    ;({ proxy, reload } = await startReloadable({ pool: { mode: 'session', size: 2 } }, logs))
  })

  afterAll(() => proxy?.close())

  const login = async (password: string) => {
    const url = proxy.url('postgres', db.name, password)
    const client = new pg.Client({ connectionString: url })
    return sqlstateOf(client.connect().finally(() => client.end()))
  }

  test('is read again: the next logins use the new passwords', async () => {
    expect(await login(POOL_PASSWORD)).toBe('ok')
    await reload({
      pool: { mode: 'session', size: 2 },
      auth: { file: writeUserlist(['"postgres" "rotated"']) },
    })
    expect(await login('rotated')).toBe('ok')
    expect(await login(POOL_PASSWORD)).toBe('28P01')
  })

  test('an unreadable one refuses the reload, and the running list stays', async () => {
    const missing = { auth: { file: scratchFile('missing-userlist.txt') } }
    await expect(reload({ pool: { mode: 'session', size: 2 }, ...missing })).rejects.toThrow(
      /cannot read auth.file/,
    )
    expect(await login('rotated')).toBe('ok')
    const config = await showConfig(proxy, 'rotated')
    expect(config.get('auth.file')).not.toBe(missing.auth.file)
  })
})
