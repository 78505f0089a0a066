import pg from 'pg'
import { Writable } from 'node:stream'
import { pino } from 'pino'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { waitFor } from '../e2e/support/wait.js'
import { queryOnce } from '../support/database.js'
import { POOL_PASSWORD, writeUserlist } from '../support/pool-auth.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { startReplicaPair, type ReplicaPair } from '../support/replica-pair.js'

/**
 * A primary with a synchronous standby. A COMMIT waits for the standby while the primary's
 * synchronous_standby_names names one that is not there ('held'); pg_cancel_backend and
 * pg_terminate_backend end the wait with PostgreSQL's WARNING, after which the transaction is
 * committed locally only.
 */
let pair: ReplicaPair
let nextId = 0
/** The proxies' log lines. */
const logged: Record<string, unknown>[] = []
const logger = pino(
  { level: 'info' },
  new Writable({
    write(line: Buffer, _encoding, done) {
      logged.push(JSON.parse(line.toString()) as Record<string, unknown>)
      done()
    },
  }),
)

beforeAll(async () => {
  pair = await startReplicaPair('sync-commit', [`synchronous_standby_names = '*'`])
  await queryOnce(pair.primary.url, 'CREATE TABLE t (id int PRIMARY KEY)')
  await queryOnce(pair.primary.url, 'CREATE TABLE invoices (id int PRIMARY KEY, status text)')
  await queryOnce(pair.primary.url, 'CREATE DATABASE other')
  // The standby acknowledges every second, not every 10: a released wait ends promptly.
  await queryOnce(pair.standby.url, 'ALTER SYSTEM SET wal_receiver_status_interval = 1')
  await queryOnce(pair.standby.url, 'SELECT pg_reload_conf()')
}, 60_000)

afterAll(async () => {
  await pair?.remove()
})

const waiters = async (): Promise<{ pid: number }[]> =>
  (
    await queryOnce(
      pair.primary.url,
      "SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'",
    )
  ).rows

/**
 * The standby the primary waits for: one that is not there ('nobody'), or any ('*'); then
 * every wait has ended.
 */
async function standby(names: 'nobody' | '*'): Promise<void> {
  await queryOnce(pair.primary.url, `ALTER SYSTEM SET synchronous_standby_names = '${names}'`)
  await queryOnce(pair.primary.url, 'SELECT pg_reload_conf()')
  await waitFor(
    async () =>
      (await queryOnce(pair.primary.url, 'SHOW synchronous_standby_names')).rows[0]
        .synchronous_standby_names === names,
    { what: `synchronous_standby_names = ${names}` },
  )
  if (names === '*')
    await waitFor(async () => (await waiters()).length === 0, {
      what: 'every wait for the standby to end',
      timeoutMs: 30_000,
    })
}

/** The backend that waits for the synchronous standby now (the only one). */
async function waitingBackend(): Promise<number> {
  let pid = 0
  await waitFor(
    async () => {
      const rows = await waiters()
      if (rows.length > 1) throw new Error(`${rows.length} backends wait for the standby`)
      pid = rows[0]?.pid ?? 0
      return rows.length === 1
    },
    { what: 'a COMMIT waiting for the synchronous standby' },
  )
  return pid
}

const waitEventOf = async (pid: number): Promise<string | null> =>
  (await queryOnce(pair.primary.url, `SELECT wait_event FROM pg_stat_activity WHERE pid = ${pid}`))
    .rows[0]?.wait_event ?? null

const rowsWith = async (url: string, id: number): Promise<number> =>
  (await queryOnce(url, `SELECT count(*)::int AS n FROM t WHERE id = ${id}`)).rows[0].n

/**
 * The COMMIT of backend `pid` (row `id`) was not cancelled: still waiting, so not yet visible
 * to anyone (a cancel would have made it visible), and it finishes on its own once the standby
 * has it.
 */
async function expectCommitLeftToFinish(pid: number, id: number): Promise<void> {
  expect(await waitEventOf(pid)).toBe('SyncRep')
  expect(await rowsWith(pair.primary.url, id)).toBe(0)
  await standby('*')
  expect(await rowsWith(pair.primary.url, id)).toBe(1)
  expect(await rowsWith(pair.standby.url, id)).toBe(1)
  expect(pair.primary.log()).not.toContain(`[${pid}] WARNING:  canceling`)
}

type Failure = Error & { code?: string; severity?: string }

const failureOf = (promise: Promise<unknown>): Promise<Failure | null> =>
  promise.then(
    () => null,
    (err: Failure) => err,
  )

const pooled = (mode: 'session' | 'transaction'): ConfigOverrides => ({
  pool: { mode, size: 4 },
  auth: { file: writeUserlist() },
})

/** Every pool mode, each with both relays (the native relay hands the WARNING to JavaScript). */
const modes: { name: string; overrides: ConfigOverrides }[] = (['native', 'node'] as const).flatMap(
  (relay) => [
    { name: `no pooling, ${relay} relay`, overrides: { relay } },
    { name: `session pooling, ${relay} relay`, overrides: { relay, ...pooled('session') } },
    { name: `transaction pooling, ${relay} relay`, overrides: { relay, ...pooled('transaction') } },
  ],
)

describe.each(modes)('$name', ({ overrides }) => {
  let proxy: TestProxy
  /** The same, with a query timeout shorter than the COMMIT's wait. */
  let timed: TestProxy
  const password = overrides.pool ? POOL_PASSWORD : undefined

  beforeAll(async () => {
    proxy = await startTestProxy(overrides, pair.primary.url, { logger })
    timed = await startTestProxy(
      { ...overrides, limits: { queryTimeoutMs: 1000 } },
      pair.primary.url,
      { logger },
    )
  })

  afterAll(async () => {
    await standby('*')
    await proxy?.close()
    await timed?.close()
  })

  async function connect(through: TestProxy = proxy): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: through.url('postgres', undefined, password) })
    client.on('error', () => {})
    await client.connect()
    return client
  }

  /** Runs `work` while the standby is held, cancels the backend that waits, returns the error. */
  async function cancelledWait(
    work: (client: pg.Client, id: number) => Promise<unknown>,
    end: 'pg_cancel_backend' | 'pg_terminate_backend' = 'pg_cancel_backend',
  ): Promise<{ failure: Failure | null; client: pg.Client; id: number }> {
    const client = await connect()
    const id = ++nextId
    await standby('nobody')
    try {
      const outcome = failureOf(work(client, id))
      const pid = await waitingBackend()
      await queryOnce(pair.primary.url, `SELECT ${end}(${pid})`)
      return { failure: await outcome, client, id }
    } finally {
      await standby('*')
    }
  }

  function expectUnknownCommit(failure: Failure | null, severity = 'ERROR'): void {
    expect(failure?.code).toBe('08007')
    expect(failure?.severity).toBe(severity)
    expect(failure?.message).toContain('may not have reached the synchronous standby')
  }

  test('a COMMIT whose wait for the standby is cancelled is 08007, and the session goes on', async () => {
    const { failure, client, id } = await cancelledWait(async (client, id) => {
      await client.query('BEGIN')
      await client.query(`INSERT INTO t VALUES (${id})`)
      return client.query('COMMIT')
    })
    expectUnknownCommit(failure)
    // It did commit, locally: the reason for "unknown" rather than "rolled back".
    expect(await rowsWith(pair.primary.url, id)).toBe(1)
    expect((await client.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    await client.end()
  })

  test('END and a named prepared COMMIT too', async () => {
    for (const commit of ['END', { name: 'commit-it', text: 'COMMIT' }]) {
      const { failure, client } = await cancelledWait(async (client, id) => {
        await client.query('BEGIN')
        await client.query(`INSERT INTO t VALUES (${id})`)
        return client.query(commit)
      })
      expectUnknownCommit(failure)
      await client.end()
    }
  })

  test('a statement outside a transaction block: simple and extended protocol', async () => {
    for (const extended of [false, true]) {
      const { failure, client, id } = await cancelledWait((client, id) =>
        extended
          ? client.query('INSERT INTO t VALUES ($1)', [id])
          : client.query(`INSERT INTO t VALUES (${id})`),
      )
      expectUnknownCommit(failure)
      expect(await rowsWith(pair.primary.url, id)).toBe(1)
      expect((await client.query('SELECT 2 AS two')).rows).toEqual([{ two: 2 }])
      await client.end()
    }
  })

  test('pg_terminate_backend during the wait: 08007, FATAL', async () => {
    const { failure, client } = await cancelledWait(async (client, id) => {
      await client.query('BEGIN')
      await client.query(`INSERT INTO t VALUES (${id})`)
      return client.query('COMMIT')
    }, 'pg_terminate_backend')
    expectUnknownCommit(failure, 'FATAL')
    await client.end().catch(() => {})
  })

  test('queryTimeoutMs: the client gets 08007, the COMMIT waiting for the standby is not cancelled', async () => {
    const client = await connect(timed)
    const id = ++nextId
    await client.query('BEGIN')
    await client.query(`INSERT INTO t VALUES (${id})`)
    const cutsBefore = logged.filter((line) => line.reason === 'queryTimeout').length
    await standby('nobody')
    try {
      const failure = await failureOf(client.query('COMMIT'))
      expect(failure?.code).toBe('08007')
      expect(failure?.message).toBe('transaction resolution unknown')
      const pid = await waitingBackend()
      await waitFor(
        () => logged.filter((line) => line.reason === 'queryTimeout').length > cutsBefore,
        { what: 'the session cut' },
      )
      await expectCommitLeftToFinish(pid, id)
    } finally {
      await standby('*')
      await client.end().catch(() => {})
    }
  })
})

test('shutdown: a COMMIT waiting for the standby is answered 08007 and not cancelled', async () => {
  const proxy = await startTestProxy({ limits: { shutdownTimeoutMs: 300 } }, pair.primary.url)
  const client = new pg.Client({ connectionString: proxy.url() })
  client.on('error', () => {})
  await client.connect()
  const id = ++nextId
  await client.query('BEGIN')
  await client.query(`INSERT INTO t VALUES (${id})`)
  await standby('nobody')
  try {
    const commit = failureOf(client.query('COMMIT'))
    const pid = await waitingBackend()
    await proxy.close()
    expect((await commit)?.code).toBe('08007')
    await expectCommitLeftToFinish(pid, id)
  } finally {
    await standby('*')
    await client.end().catch(() => {})
  }
})

test("the proxy states a fenced database's replication guarantee once", async () => {
  const lines: Record<string, unknown>[] = []
  const proxy = await startTestProxy(
    { fencing: { tables: [{ name: 'invoices' }] } },
    pair.primary.url,
    {
      logger: pino(
        { level: 'info' },
        new Writable({
          write(line: Buffer, _encoding, done) {
            lines.push(JSON.parse(line.toString()) as Record<string, unknown>)
            done()
          },
        }),
      ),
    },
  )
  try {
    for (const database of ['postgres', 'postgres', 'other']) {
      const client = new pg.Client({ connectionString: proxy.url(undefined, database) })
      await client.connect()
      await client.query('SELECT 1')
      await client.end()
    }
    const stated = lines.filter((line) => String(line.msg).startsWith('replication: '))
    expect(stated.map((line) => line.database)).toEqual(['postgres', 'other'])
    expect(stated[0]).toMatchObject({
      replication: 'synchronous standbys',
      msg: expect.stringContaining(
        'replication: synchronous standbys: a failover to a synchronous standby loses no acknowledged commit',
      ),
    })
  } finally {
    await proxy.close()
  }
})

test('a failover cut of a node still connected answers 08007 and does not cancel the COMMIT waiting for the standby', async () => {
  const proxy = await startTestProxy(
    {
      upstream: {
        hosts: [pair.primary.hostPort, pair.standby.hostPort],
        primaryCheckIntervalMs: 100,
      },
    },
    pair.primary.url,
  )
  const client = new pg.Client({ connectionString: proxy.url() })
  client.on('error', () => {})
  await client.connect()
  const id = ++nextId
  await client.query('BEGIN')
  await client.query(`INSERT INTO t VALUES (${id})`)
  await standby('nobody')
  const readOnly = async (on: 'on' | 'off') => {
    await queryOnce(pair.primary.url, `ALTER SYSTEM SET default_transaction_read_only = ${on}`)
    await queryOnce(pair.primary.url, 'SELECT pg_reload_conf()')
  }
  try {
    const commit = failureOf(client.query('COMMIT'))
    const pid = await waitingBackend()
    // The node stops qualifying as the primary while it is still up: its sessions are cut.
    await readOnly('on')
    const failure = await commit
    expect(failure?.code).toBe('08007')
    expect(failure?.message).toBe('transaction resolution unknown')
    expect(await waitEventOf(pid)).toBe('SyncRep')
    expect(await rowsWith(pair.primary.url, id)).toBe(0)
    await standby('*')
    expect(await rowsWith(pair.primary.url, id)).toBe(1)
    expect(pair.primary.log()).not.toContain(`[${pid}] WARNING:  canceling`)
  } finally {
    await readOnly('off')
    await standby('*')
    await client.end().catch(() => {})
    await proxy.close()
  }
})
