import net from 'node:net'
import { writeFileSync } from 'node:fs'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { stringify } from 'yaml'
import { capturingLogger } from '../fencing-e2e/support.js'
import { backendMessages, sendCancelRequest, type BackendMessage } from '../e2e/support/wire.js'
import { waitFor } from '../e2e/support/wait.js'
import { createTestDatabase, queryOnce, type TestDatabase } from '../support/database.js'
import { POOL_PASSWORD, scratchFile, writeUserlist } from '../support/pool-auth.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { openDescriptors, openedSince } from '../support/descriptors.js'

/**
 * Lending in C (src/native/login-lend.c, src/session/lent-in-c.ts): a session pool's idle
 * connection, reset in C, is shelved for the startup packet of the client it served last, and
 * the next login in C with that packet is served on it without JavaScript until its session
 * starts. To a client it must look as a login JavaScript serves does.
 */

let db: TestDatabase

beforeAll(async () => {
  db = await createTestDatabase('lent_in_c')
})

afterAll(async () => {
  await db?.drop()
})

/** A session pool of one connection (every client gets the same), reloadable from its file. */
async function startLending(overrides: ConfigOverrides = {}) {
  const logs: Record<string, unknown>[] = []
  const file = scratchFile('pgfence.yaml')
  const upstream = new URL(db.url)
  const full = (more: ConfigOverrides): ConfigOverrides => ({
    listen: { host: '127.0.0.1', port: 0 },
    upstream: { host: upstream.hostname, port: Number(upstream.port) },
    pool: { mode: 'session', size: 1 },
    auth: { file: writeUserlist() },
    admin: { users: ['postgres'] },
    relay: 'native',
    limits: { shutdownTimeoutMs: 2000 },
    log: { level: 'debug' },
    ...more,
  })
  writeFileSync(file, stringify(full(overrides)))
  const logger = capturingLogger(logs)
  logger.level = 'debug' // as the config says: a reload sets it from there
  const proxy = await startTestProxy(full(overrides), db.url, { configFile: file, logger })
  const reload = async (more: ConfigOverrides) => {
    writeFileSync(file, stringify(full(more)))
    await proxy.reload()
  }
  /**
   * The connection numbers of the sessions lent in C so far, those under way reported first (a
   * login lent quietly is logged when JavaScript hears of it).
   */
  const lent = () => {
    proxy.nativeSessionCount()
    return logs
      .filter((line) => line.lent === true && line.msg === 'session relayed natively')
      .map((line) => line.conn)
  }
  /** The connection numbers of the sessions whose connection went back on the shelf in C. */
  const backOnShelf = () =>
    logs
      .filter((line) => line.msg === 'server connection back on the shelf in C')
      .map((line) => line.conn)
  /**
   * The logins lent in C quietly that left their connection back on the shelf before JavaScript
   * heard of them, each with its transactions (taken in first).
   */
  const quietReturns = () => {
    proxy.nativeSessionCount()
    return logs
      .filter((line) => line.msg === 'logins lent in C left before JavaScript heard of them')
      .map((line) => line.transactions)
  }
  return { proxy, logs, reload, lent, backOnShelf, quietReturns }
}

/** A client of the proxy, with every byte the proxy sent it up to its first ReadyForQuery. */
async function connect(proxy: TestProxy, applicationName = 'lent-in-c') {
  const socket = new net.Socket()
  const received: Buffer[] = []
  const record = (chunk: Buffer) => received.push(Buffer.from(chunk))
  socket.on('data', record)
  const client = new pg.Client({
    connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
    application_name: applicationName,
    stream: () => socket,
  })
  client.on('error', () => {})
  await client.connect()
  socket.off('data', record)
  const messages = backendMessages(Buffer.concat(received))
  const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid
  return { client, greeting: afterAuthentication(messages), pid }
}

/** The application_name the server has for a client's session. */
const applicationNameOf = async (client: pg.Client) =>
  (await client.query<{ application_name: string }>('SHOW application_name')).rows[0]!
    .application_name

/** What follows AuthenticationOk: ParameterStatus messages, BackendKeyData, ReadyForQuery. */
function afterAuthentication(messages: BackendMessage[]): BackendMessage[] {
  const ok = messages.findIndex((m) => m.type === 'R' && m.body.readInt32BE(0) === 0)
  return messages.slice(ok + 1)
}

/** A console command's rows. */
async function consoleRows(proxy: TestProxy, command: string) {
  const console = new pg.Client({
    connectionString: proxy.url('postgres', 'pgfence', POOL_PASSWORD),
  })
  await console.connect()
  try {
    return (await console.query<Record<string, string>>(command)).rows
  } finally {
    await console.end()
  }
}

/** The idle server connections of the test database's pool, as SHOW POOLS counts them. */
async function idleConnections(proxy: TestProxy): Promise<number> {
  const rows = await consoleRows(proxy, 'SHOW POOLS')
  return Number(rows.find((row) => row.database === db.name)?.sv_idle ?? 0)
}

const idleAgain = (proxy: TestProxy) =>
  waitFor(async () => (await idleConnections(proxy)) === 1, { what: 'the connection back idle' })

/** A greeting's statuses in their order, BackendKeyData as 'K' (its key is each client's own). */
const greetingShape = (greeting: BackendMessage[]) =>
  greeting.map((m) => (m.type === 'K' ? 'K' : `${m.type}${m.body.toString('latin1')}`))

const cancelKeyOf = (greeting: BackendMessage[]) => greeting.find((m) => m.type === 'K')!.body

/**
 * A client leaves, its connection's backend is ended while C watches the connection idle: the
 * next client like it is not lent it, and gets another.
 */
async function notLentAfterItsServerLeft(start: () => ReturnType<typeof startLending>) {
  const { proxy, lent } = await start()
  try {
    const first = await connect(proxy)
    await first.client.end()
    await idleAgain(proxy)
    await queryOnce(db.url, `SELECT pg_terminate_backend(${first.pid})`)
    await waitFor(async () => (await idleConnections(proxy)) === 0, {
      what: 'the connection closed',
    })
    const next = await connect(proxy)
    expect(lent()).toHaveLength(0)
    expect(next.pid).not.toBe(first.pid)
    await next.client.end()
  } finally {
    await proxy.close()
  }
}

/**
 * A client, gone, then one like it, lent the connection the first left: greeted with the same
 * statuses in the same order, and a BackendKeyData of its own.
 */
async function lentAfterAnother(proxy: TestProxy, lent: () => unknown[]) {
  const first = await connect(proxy)
  await first.client.end()
  await idleAgain(proxy)
  const second = await connect(proxy)
  expect(lent()).toHaveLength(1)
  expect(second.pid).toBe(first.pid)
  expect(greetingShape(second.greeting)).toEqual(greetingShape(first.greeting))
  expect(cancelKeyOf(second.greeting).equals(cancelKeyOf(first.greeting))).toBe(false)
  return second
}

test('a login like the last client of an idle connection is lent it in C, greeted as JavaScript greets', async () => {
  const { proxy, lent } = await startLending()
  try {
    const second = await lentAfterAnother(proxy, lent)
    expect(second.greeting.at(-1)).toMatchObject({ type: 'Z' })
    expect(await applicationNameOf(second.client)).toBe('lent-in-c')
    // The console shows it as any session, relayed natively, its statement counted.
    expect(await consoleRows(proxy, 'SHOW CLIENTS')).toEqual([
      expect.objectContaining({
        id: String(lent()[0]),
        database: db.name,
        state: 'idle',
        relay: 'native',
        transactions: '2',
      }),
    ])
    await second.client.end()
  } finally {
    await proxy.close()
  }
})

test("a lent session's cancel request reaches its query", async () => {
  const { proxy, lent } = await startLending()
  try {
    await (await connect(proxy)).client.end()
    await idleAgain(proxy)
    const { client } = await connect(proxy)
    expect(lent()).toHaveLength(1)
    await cancelWithKey(proxy, client, client.query('SELECT pg_sleep(10)'))
    await client.end()
  } finally {
    await proxy.close()
  }
})

test('a client with other settings is served by JavaScript, and the next like it is lent', async () => {
  const { proxy, lent } = await startLending()
  try {
    await (await connect(proxy, 'first')).client.end()
    await idleAgain(proxy)
    const other = await connect(proxy, 'other')
    expect(lent()).toHaveLength(0)
    expect(await applicationNameOf(other.client)).toBe('other')
    await other.client.end()
    await idleAgain(proxy)
    const again = await connect(proxy, 'other')
    expect(lent()).toHaveLength(1)
    expect(await applicationNameOf(again.client)).toBe('other')
    await again.client.end()
  } finally {
    await proxy.close()
  }
})

test('a connection whose server left while it waited is not lent: the next client gets another', () =>
  notLentAfterItsServerLeft(startLending))

test("a reload reaches the shelf: a lent session's relay takes the new maxMessageBytes", () =>
  reloadReachesTheShelf({ mode: 'session', size: 1 }))

/**
 * A client leaves its pool's one connection, a reload lowers maxMessageBytes: the next client
 * like it is lent the connection, shelved again, and its relay refuses a longer message.
 */
async function reloadReachesTheShelf(pool: ConfigOverrides['pool']) {
  const { proxy, reload, lent } = await startLending({ pool })
  try {
    await (await connect(proxy)).client.end()
    await idleAgain(proxy)
    await reload({ pool, limits: { shutdownTimeoutMs: 2000, maxMessageBytes: 4096 } })
    const { client } = await connect(proxy)
    expect(lent()).toHaveLength(1)
    await expect(client.query(`SELECT '${'x'.repeat(8192)}'`)).rejects.toMatchObject({
      code: '08P01',
    })
  } finally {
    await proxy.close()
  }
}

/** The server connection `pid` has answered its reset (its last statement is no longer ours). */
const resetDone = (pid: number) =>
  waitFor(
    async () =>
      (
        await queryOnce(
          db.url,
          `SELECT 1 FROM pg_stat_activity WHERE pid = ${pid} AND state = 'idle'
             AND query NOT LIKE '%pg_backend_pid%'`,
        )
      ).rows.length === 1,
    { what: 'the reset answered' },
  )

/** Cancels `sleeping`'s query with the key `client` was greeted with. */
async function cancelWithKey(proxy: TestProxy, client: pg.Client, sleeping: Promise<unknown>) {
  await waitFor(
    async () =>
      (
        await queryOnce(
          db.url,
          `SELECT 1 FROM pg_stat_activity WHERE datname = '${db.name}'
             AND query = 'SELECT pg_sleep(10)' AND state = 'active'`,
        )
      ).rows.length === 1,
    { what: 'the query to run' },
  )
  const { processID, secretKey } = client as unknown as { processID: number; secretKey: number }
  await sendCancelRequest(proxy.port, processID, secretKey)
  await expect(sleeping).rejects.toMatchObject({ code: '57014' })
}

test("a lent session's connection goes back on the shelf in C at its goodbye, for the next like client with a key of its own", async () => {
  const { proxy, lent, backOnShelf, quietReturns } = await startLending()
  try {
    const first = await connect(proxy)
    await first.client.end()
    await idleAgain(proxy)
    const second = await connect(proxy)
    await second.client.end()
    await resetDone(second.pid)
    // Lent quietly, it left before JavaScript heard of it: its pg_backend_pid() counted.
    expect(quietReturns()).toEqual([1])
    expect(lent()).toEqual([])
    expect(backOnShelf()).toEqual([])
    const third = await connect(proxy)
    expect(lent()).toHaveLength(1)
    expect(third.pid).toBe(first.pid)
    expect(greetingShape(third.greeting)).toEqual(greetingShape(first.greeting))
    expect(cancelKeyOf(third.greeting).equals(cancelKeyOf(second.greeting))).toBe(false)
    // The key the second client was greeted with is forgotten: it cancels nothing now.
    const { processID, secretKey } = second.client as unknown as Record<string, number>
    const sleeping = third.client.query('SELECT pg_sleep(10)')
    await sendCancelRequest(proxy.port, processID!, secretKey!)
    await cancelWithKey(proxy, third.client, sleeping)
    // What the second client's reset in C undid stays undone for the third.
    expect(await applicationNameOf(third.client)).toBe('lent-in-c')
    await third.client.end()
  } finally {
    await proxy.close()
  }
})

test('quiet returns to one connection are taken in as one: their transactions summed, the latest key adopted', async () => {
  const { proxy, quietReturns } = await startLending()
  try {
    const first = await connect(proxy)
    await first.client.end()
    await idleAgain(proxy)
    // Six clients lent quietly, one after another, in far less time than six sweeps.
    const quiet = 6
    for (let i = 0; i < quiet; i++) {
      const { client, pid } = await connect(proxy)
      await client.query('SELECT 1')
      await client.end()
      await resetDone(pid)
    }
    const returns = quietReturns()
    expect(returns.length).toBeLessThan(quiet)
    expect(returns.reduce<number>((sum, transactions) => sum + Number(transactions), 0)).toBe(
      2 * quiet,
    )
    // The next client's key, adopted from the last return, reaches its query.
    const next = await connect(proxy)
    expect(next.pid).toBe(first.pid)
    await cancelWithKey(proxy, next.client, next.client.query('SELECT pg_sleep(10)'))
    await next.client.end()
  } finally {
    await proxy.close()
  }
})

describe("the pool's sweep", () => {
  /** Whether JavaScript heard of a login lent in C while it was under way, read from the log. */
  const reported = (logs: Record<string, unknown>[]) =>
    logs.some((line) => line.lent === true && line.msg === 'session relayed natively')

  /** A client that leaves its connection idle, shelved for the next like it; its backend. */
  async function leftIdle(proxy: TestProxy): Promise<number> {
    const { client, pid } = await connect(proxy)
    await client.end()
    await idleAgain(proxy)
    return pid
  }

  /** A lent client still on backend `pid`, in a session of its own; it leaves. */
  async function stillOn({ client, pid }: Awaited<ReturnType<typeof connect>>, backend: number) {
    expect(pid).toBe(backend)
    expect(await applicationNameOf(client)).toBe('lent-in-c')
    await client.end()
  }

  test('takes in a quiet return without reporting the client lent quietly now', async () => {
    const { proxy, logs, lent } = await startLending()
    try {
      const backend = await leftIdle(proxy)
      const second = await connect(proxy)
      await second.client.end()
      await resetDone(second.pid)
      const third = await connect(proxy)
      // Only the sweep (once a second) takes the return in: nothing else settles meanwhile.
      await waitFor(
        () =>
          logs.some((line) => line.msg === 'logins lent in C left before JavaScript heard of them'),
        { what: 'the sweep' },
      )
      expect(reported(logs)).toBe(false)
      expect(lent()).toHaveLength(1)
      await stillOn(third, backend)
    } finally {
      await proxy.close()
    }
  })

  test('with a connection idle too long to close, reports the client lent quietly first and leaves it its connection', async () => {
    // A sweep each second; the lent connection shows idle (since the first client left) until then.
    const { proxy, logs } = await startLending({
      pool: { mode: 'session', size: 1, idleTimeoutMs: 2000 },
    })
    try {
      const backend = await leftIdle(proxy)
      const second = await connect(proxy)
      await waitFor(() => reported(logs), { what: 'the sweep' })
      await stillOn(second, backend)
    } finally {
      await proxy.close()
    }
  })
})

test("a lent session's connection goes to a client waiting in the pool, not back on the shelf", async () => {
  const { proxy, lent, backOnShelf } = await startLending({
    pool: { mode: 'session', size: 1, waitTimeoutMs: 5000 },
  })
  try {
    await (await connect(proxy)).client.end()
    await idleAgain(proxy)
    const holder = await connect(proxy)
    expect(lent()).toHaveLength(1)
    const waiting = connect(proxy, 'waiting')
    await waitFor(
      async () =>
        (await consoleRows(proxy, 'SHOW POOLS')).some(
          (row) => row.database === db.name && row.cl_waiting === '1',
        ),
      { what: 'the second client to wait' },
    )
    await holder.client.end()
    const served = await waiting
    expect(served.pid).toBe(holder.pid)
    expect(lent()).toHaveLength(1)
    expect(backOnShelf()).toHaveLength(0)
    expect(await applicationNameOf(served.client)).toBe('waiting')
    await served.client.end()
  } finally {
    await proxy.close()
  }
})

/** A client leaves its connection idle, the next like it is lent it quietly and leaves: its backend. */
async function returnedQuietly(proxy: TestProxy): Promise<number> {
  await (await connect(proxy)).client.end()
  await idleAgain(proxy)
  const second = await connect(proxy)
  await second.client.end()
  await resetDone(second.pid)
  return second.pid
}

test('a connection back on the shelf in C whose server leaves is not lent again', async () => {
  const { proxy, lent, quietReturns } = await startLending()
  try {
    const backend = await returnedQuietly(proxy)
    expect(quietReturns()).toEqual([1])
    await queryOnce(db.url, `SELECT pg_terminate_backend(${backend})`)
    const next = await connect(proxy)
    expect(lent()).toEqual([])
    expect(next.pid).not.toBe(backend)
    await next.client.end()
  } finally {
    await proxy.close()
  }
})

test('a quiet return to a connection whose server then leaves still counts its transactions', async () => {
  const { proxy, quietReturns } = await startLending()
  try {
    const backend = await returnedQuietly(proxy)
    await queryOnce(db.url, `SELECT pg_terminate_backend(${backend})`)
    await waitFor(async () => (await idleConnections(proxy)) === 0, {
      what: 'the connection closed',
    })
    expect(quietReturns()).toEqual([1])
  } finally {
    await proxy.close()
  }
})

describe('transaction pools', () => {
  const transactionPool = (more: Partial<ConfigOverrides['pool']> = {}) =>
    startLending({ pool: { mode: 'transaction', size: 1, ...more } })

  test('a connection a client left is lent in C to the next like it, greeted as JavaScript greets', async () => {
    const { proxy, lent } = await transactionPool()
    try {
      const second = await lentAfterAnother(proxy, lent)
      expect(await applicationNameOf(second.client)).toBe('lent-in-c')
      expect(await consoleRows(proxy, 'SHOW CLIENTS')).toEqual([
        expect.objectContaining({ id: String(lent()[0]), relay: 'native', state: 'idle' }),
      ])
      await cancelWithKey(proxy, second.client, second.client.query('SELECT pg_sleep(10)'))
      await second.client.end()
    } finally {
      await proxy.close()
    }
  })

  test('a lent client gives its connection to a client that waits, and goes on in JavaScript', async () => {
    const { proxy, lent } = await transactionPool({ waitTimeoutMs: 5000 })
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const holder = await connect(proxy)
      expect(lent()).toHaveLength(1)
      const other = await connect(proxy, 'other')
      expect(other.pid).toBe(holder.pid)
      expect(await applicationNameOf(other.client)).toBe('other')
      // The holder reads its client again from JavaScript, on the connection it takes back.
      for (let i = 0; i < 3; i++) {
        expect(await applicationNameOf(holder.client)).toBe('lent-in-c')
        expect(await applicationNameOf(other.client)).toBe('other')
      }
      await other.client.end()
      await holder.client.end()
      expect(lent()).toHaveLength(1)
    } finally {
      await proxy.close()
    }
  })

  test("a lent client's goodbye puts the connection back on the shelf in C, its statements gone for the next", async () => {
    const { proxy, lent, backOnShelf } = await transactionPool()
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const before = openDescriptors()
      const second = await connect(proxy)
      expect((await second.client.query({ name: 's', text: 'SELECT 1 AS v' })).rows).toEqual([
        { v: 1 },
      ])
      await second.client.end()
      await resetDone(second.pid)
      expect(backOnShelf()).toEqual(lent())
      const third = await connect(proxy)
      expect(lent()).toHaveLength(2)
      expect(third.pid).toBe(second.pid)
      // Another statement of the same name: the server no longer has the second client's.
      expect((await third.client.query({ name: 's', text: 'SELECT 2 AS v' })).rows).toEqual([
        { v: 2 },
      ])
      await cancelWithKey(proxy, third.client, third.client.query('SELECT pg_sleep(10)'))
      await third.client.end()
      await resetDone(third.pid)
      // Each client's duplicate of its descriptor closed with it.
      await waitFor(() => openedSince(before, db.port).length === 0, {
        what: 'no descriptor left open of those the test opened',
      })
    } finally {
      await proxy.close()
    }
  })

  test('a connection whose server left while C watched it is not lent: the next client gets another', () =>
    notLentAfterItsServerLeft(transactionPool))

  test("a reload reaches the shelf: the connection is shelved again, and its next client's relay takes the new maxMessageBytes", () =>
    reloadReachesTheShelf({ mode: 'transaction', size: 1 }))

  test('a client lent quietly that changed no setting leaves its connection to the next without a reset, as JavaScript does between transactions', async () => {
    const { proxy, quietReturns } = await transactionPool()
    await queryOnce(db.url, 'CREATE SEQUENCE IF NOT EXISTS lent_numbers')
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const second = await connect(proxy)
      const { rows } = await second.client.query('SELECT nextval($1) AS n', ['lent_numbers'])
      await second.client.end()
      await waitFor(() => quietReturns().length === 1, { what: 'the goodbye' })
      const third = await connect(proxy)
      expect(third.pid).toBe(second.pid)
      // What a DISCARD ALL would have cleared is still there.
      expect((await third.client.query('SELECT lastval() AS n')).rows).toEqual(rows)
      expect(await applicationNameOf(third.client)).toBe('lent-in-c')
      await third.client.end()
    } finally {
      await proxy.close()
    }
  })

  test('a lent client whose server reports a setting changed is heard of, and leaves its connection reset', async () => {
    const { proxy, quietReturns, backOnShelf } = await transactionPool()
    // No statement JavaScript intercepts: the change shows only in the server's ParameterStatus.
    await queryOnce(
      db.url,
      `CREATE OR REPLACE FUNCTION lent_rename() RETURNS text LANGUAGE sql
         AS $$ SELECT set_config('application_name', 'renamed', false) $$`,
    )
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const second = await connect(proxy)
      await second.client.query('SELECT lent_rename()')
      expect(await applicationNameOf(second.client)).toBe('renamed')
      await second.client.end()
      await waitFor(() => backOnShelf().length === 1, { what: 'the goodbye' })
      expect(quietReturns()).toEqual([])
      const third = await connect(proxy)
      expect(third.pid).toBe(second.pid)
      expect(await applicationNameOf(third.client)).toBe('lent-in-c')
      await third.client.end()
    } finally {
      await proxy.close()
    }
  })

  test('a lent client that changes a setting gives the connection back through the pool, reset', async () => {
    const { proxy, lent, backOnShelf } = await transactionPool()
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const second = await connect(proxy)
      expect(lent()).toHaveLength(1)
      await second.client.query("SET application_name = 'changed'")
      expect(await applicationNameOf(second.client)).toBe('changed')
      await second.client.end()
      await idleAgain(proxy)
      expect(backOnShelf()).toHaveLength(0)
      const third = await connect(proxy)
      expect(await applicationNameOf(third.client)).toBe('lent-in-c')
      await third.client.end()
    } finally {
      await proxy.close()
    }
  })
})

/** A client lent its pool's one connection in C, once a client like it has left it. */
async function lentClient(proxy: TestProxy, lent: () => unknown[]) {
  await (await connect(proxy)).client.end()
  await idleAgain(proxy)
  const client = await connect(proxy)
  expect(lent()).toHaveLength(1)
  return client
}

/**
 * A lent login makes no session until JavaScript must take part (src/session/lent-login.ts):
 * what the console, a reload, a timeout and a shutdown ask of it must find it as a session.
 */
describe('a lent login before its session is made', () => {
  /** The transactions SHOW STATS counts. */
  const transactionsCounted = async (proxy: TestProxy) =>
    Number((await consoleRows(proxy, 'SHOW STATS'))[0]!.transactions)

  test('a lent client that says goodbye counts its transactions in SHOW STATS', async () => {
    const { proxy, lent, backOnShelf } = await startLending()
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const before = await transactionsCounted(proxy)
      const { client } = await connect(proxy)
      expect(lent()).toHaveLength(1)
      for (let i = 0; i < 3; i++) await client.query('SELECT 1')
      await client.end()
      await waitFor(() => backOnShelf().length === 1, { what: 'the goodbye' })
      expect(lent()).toEqual(backOnShelf())
      // Its pg_backend_pid() and three statements.
      expect((await transactionsCounted(proxy)) - before).toBe(4)
    } finally {
      await proxy.close()
    }
  })

  test('a login lent quietly that says goodbye counts its transactions in SHOW STATS', async () => {
    const { proxy, lent, quietReturns } = await startLending()
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const before = await transactionsCounted(proxy)
      const { client, pid } = await connect(proxy)
      for (let i = 0; i < 3; i++) await client.query('SELECT 1')
      await client.end()
      await resetDone(pid)
      expect(quietReturns()).toEqual([4])
      expect(lent()).toEqual([])
      expect((await transactionsCounted(proxy)) - before).toBe(4)
    } finally {
      await proxy.close()
    }
  })

  test('a client lent quietly gives its connection to a client that waits, which JavaScript serves', async () => {
    const { proxy, lent, backOnShelf, quietReturns } = await startLending({
      pool: { mode: 'session', size: 1, waitTimeoutMs: 5000 },
    })
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const holder = await connect(proxy)
      // Another StartupMessage: JavaScript serves it, and the pool hears of the lease first.
      const waiting = connect(proxy, 'waiting')
      await waitFor(
        async () =>
          (await consoleRows(proxy, 'SHOW POOLS')).some(
            (row) => row.database === db.name && row.cl_waiting === '1' && row.sv_active === '1',
          ),
        { what: 'the second client to wait' },
      )
      await holder.client.end()
      const served = await waiting
      expect(served.pid).toBe(holder.pid)
      expect(lent()).toHaveLength(1)
      expect(backOnShelf()).toEqual([])
      expect(quietReturns()).toEqual([])
      expect(await applicationNameOf(served.client)).toBe('waiting')
      await served.client.end()
    } finally {
      await proxy.close()
    }
  })

  test('a client lent quietly counts against maxClientConnections', async () => {
    const { proxy } = await startLending({ limits: { maxClientConnections: 1 } })
    try {
      await (await connect(proxy)).client.end()
      await idleAgain(proxy)
      const holder = await connect(proxy)
      const extra = new pg.Client({
        connectionString: proxy.url('postgres', db.name, POOL_PASSWORD),
      })
      await expect(extra.connect()).rejects.toMatchObject({ code: '53300' })
      await holder.client.end()
    } finally {
      await proxy.close()
    }
  })

  for (const [mode, state] of [
    ['session', 'active'],
    ['transaction', 'in_transaction'],
  ] as const) {
    test(`${mode} pool: SHOW CLIENTS shows a lent client's statement under way as ${state}, as a session's`, async () => {
      const { proxy, lent } = await startLending({ pool: { mode, size: 1 } })
      try {
        const { client } = await lentClient(proxy, lent)
        const sleeping = client.query('SELECT pg_sleep(10)')
        await waitFor(async () => (await consoleRows(proxy, 'SHOW CLIENTS'))[0]?.state === state, {
          what: `the client ${state}`,
        })
        await cancelWithKey(proxy, client, sleeping)
        expect((await consoleRows(proxy, 'SHOW CLIENTS'))[0]).toMatchObject({ state: 'idle' })
        await client.end()
      } finally {
        await proxy.close()
      }
    })
  }

  for (const mode of ['session', 'transaction'] as const) {
    test(`${mode} pool: a reload while a lent client is connected gives its relay the new maxMessageBytes`, async () => {
      const pool = { mode, size: 1 }
      const { proxy, reload, lent } = await startLending({ pool })
      try {
        const { client } = await lentClient(proxy, lent)
        await client.query(`SELECT '${'x'.repeat(8192)}'`)
        await reload({ pool, limits: { shutdownTimeoutMs: 2000, maxMessageBytes: 4096 } })
        await expect(client.query(`SELECT '${'x'.repeat(8192)}'`)).rejects.toMatchObject({
          code: '08P01',
        })
      } finally {
        await proxy.close()
      }
    })
  }

  test('a lent client idle in a transaction is cut by idleTransactionTimeoutMs', async () => {
    const limits = { shutdownTimeoutMs: 2000, idleTransactionTimeoutMs: 300 }
    const { proxy, lent } = await startLending({ limits })
    try {
      const { client } = await lentClient(proxy, lent)
      const error = new Promise((resolve) => client.once('error', resolve))
      await client.query('BEGIN')
      expect(await error).toMatchObject({ code: '25P03' })
    } finally {
      await proxy.close()
    }
  })

  test('a shutdown ends an idle lent client at once', async () => {
    const { proxy, lent } = await startLending({ limits: { shutdownTimeoutMs: 120_000 } })
    const { client } = await lentClient(proxy, lent)
    const error = new Promise((resolve) => client.once('error', resolve))
    // Within the test timeout (60 s) only if the idle client is closed, not waited for.
    await proxy.close()
    expect(await error).toMatchObject({ code: '57P01' })
  })
})
