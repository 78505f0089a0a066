import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'
import { installSql } from '../../src/schema/install.js'
import { parseConfig } from '../../src/config/load.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { createRewriter } from '../../src/rewrite/rewriter.js'
import type { StatementRewriter } from '../../src/rewrite/statement-rewriter.js'
import { backendMessages, errorCode, loggedInRawSocket } from './support/wire.js'
import { waitFor } from './support/wait.js'

const fencing = { tables: [{ name: 'counters' }] }

let db: TestDatabase
let proxy: TestProxy
let nodeRelayProxy: TestProxy

/** A query on the test database, past the proxy. */
async function direct(sql: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await client.connect()
  try {
    return await client.query(sql)
  } finally {
    await client.end()
  }
}

beforeAll(async () => {
  db = await createTestDatabase('e2e_native_relay')
  await direct('CREATE TABLE counters (id int PRIMARY KEY, hits int NOT NULL)')
  await direct(installSql(parseConfig({ fencing }).fencing))
  await direct('INSERT INTO counters (id, hits) VALUES (1, 0)')
  const upstream = { tls: 'disable' as const }
  proxy = await startTestProxy({ fencing, upstream, relay: 'native' }, db.url)
  nodeRelayProxy = await startTestProxy({ fencing, upstream, relay: 'node' }, db.url)
})

afterAll(async () => {
  await proxy?.close()
  await nodeRelayProxy?.close()
  await db?.drop()
})

function message(type: string, body: Buffer): Buffer {
  const header = Buffer.alloc(5)
  header.write(type)
  header.writeUInt32BE(body.length + 4, 1)
  return Buffer.concat([header, body])
}

const cstring = (text: string) => Buffer.from(`${text}\0`)

/** Parse, Bind, Execute, Sync of a parameterless statement, then a simple Query. */
function pipeline(extended: string, simple: string): Buffer {
  return Buffer.concat([
    message('P', Buffer.concat([cstring(''), cstring(extended), Buffer.alloc(2)])),
    message('B', Buffer.concat([cstring(''), cstring(''), Buffer.alloc(6)])),
    message('E', Buffer.concat([cstring(''), Buffer.alloc(4)])),
    message('S', Buffer.alloc(0)),
    message('Q', cstring(simple)),
  ])
}

describe('the native relay', () => {
  test('takes plain sessions over after login; relay: node keeps them in JavaScript', async () => {
    for (const [target, expected] of [
      [proxy, 1],
      [nodeRelayProxy, 0],
    ] as const) {
      const client = new pg.Client({ connectionString: target.url() })
      await client.connect()
      expect((await client.query('SELECT 41 + 1 AS answer')).rows[0].answer).toBe(42)
      expect(target.nativeSessionCount()).toBe(expected)
      await client.end()
      await waitFor(() => target.nativeSessionCount() === 0, { what: 'the session to end' })
    }
  })

  test('a fenced pipeline split at every byte is framed, rewritten and answered', async () => {
    const bytes = pipeline(
      'UPDATE counters SET hits = hits + 1 WHERE id = 1 /* fencing_token=7 */',
      'UPDATE counters SET hits = hits + 1 WHERE id = 1 -- fencing_token=7',
    )
    const socket = await loggedInRawSocket(proxy.port, 'postgres', db.name)
    let received = Buffer.alloc(0)
    let readyCount = 0
    let onReady = () => {}
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk])
      readyCount = backendMessages(received).filter((m) => m.type === 'Z').length
      onReady()
    })
    for (let split = 1; split < bytes.length; split++) {
      const expected = readyCount + 2
      const answered = new Promise<void>(
        (resolve) => (onReady = () => readyCount >= expected && resolve()),
      )
      await new Promise((resolve) => socket.write(bytes.subarray(0, split), resolve))
      await new Promise((resolve) => socket.write(bytes.subarray(split), resolve))
      await answered
    }
    socket.destroy()
    const messages = backendMessages(received)
    expect(messages.filter((m) => m.type === 'E').map(errorCode)).toEqual([])
    const tags = messages.filter((m) => m.type === 'C').map((m) => m.body.toString('latin1'))
    expect(tags).toEqual(Array.from({ length: 2 * (bytes.length - 1) }, () => 'UPDATE 1\0'))
    const row = await direct('SELECT hits, fencing_token FROM counters WHERE id = 1')
    expect(row.rows[0]).toEqual({ hits: 2 * (bytes.length - 1), fencing_token: '7' })
  })

  test('a stale write through the native relay gets PF409 and the session goes on', async () => {
    const client = new pg.Client({ connectionString: proxy.url() })
    await client.connect()
    const stale = client.query('UPDATE counters SET hits = 0 WHERE id = 1 /* fencing_token=1 */')
    await expect(stale).rejects.toMatchObject({ code: 'PF409' })
    expect(
      (await client.query('SELECT hits FROM counters WHERE id = 1')).rows[0].hits,
    ).toBeGreaterThan(0)
    expect(proxy.nativeSessionCount()).toBe(1)
    await client.end()
  })
})

/** A fencing proxy whose rewriter counts how often the native relay had to call into it. */
async function countingProxy(queryCacheSize?: number) {
  const inner = await createRewriter(parseConfig({ fencing }).fencing)
  const calls = { templateForQuery: 0, rewriteQuery: 0 }
  const rewriter: StatementRewriter = {
    prefilterNeedles: inner.prefilterNeedles,
    commentKeys: inner.commentKeys,
    rewriteParse: (sql) => inner.rewriteParse(sql),
    rewriteQuery: (sql) => (calls.rewriteQuery++, inner.rewriteQuery(sql)),
    templateForQuery: (text) => (calls.templateForQuery++, inner.templateForQuery(text)),
  }
  const upstream = { tls: 'disable' as const }
  const counted = await startTestProxy({ fencing, upstream, relay: 'native' }, db.url, {
    rewriter,
    queryCacheSize,
  })
  const client = new pg.Client({ connectionString: counted.url() })
  await client.connect()
  const close = async () => {
    await client.end()
    await counted.close()
  }
  return { client, calls, close }
}

describe('the native Query template cache', () => {
  beforeAll(() => direct('INSERT INTO counters (id, hits) VALUES (2, 0)'))

  const hitsOf2 = async () => (await direct('SELECT hits FROM counters WHERE id = 2')).rows[0].hits

  test('texts that differ only in literals and comment values share one template, filled in C', async () => {
    const { client, calls, close } = await countingProxy()
    const sql = (hits: number) =>
      `UPDATE counters SET hits = ${hits} WHERE id = 2 RETURNING hits, fencing_token`
    try {
      for (let hits = 1; hits <= 20; hits++) {
        const comment = `/*traceparent='00-${hits}-01',fencing_token='${100 + hits}'*/`
        const { rows } = await client.query(`${comment} ${sql(hits)}`)
        expect(rows).toEqual([{ hits, fencing_token: String(100 + hits) }])
      }
      const stale = client.query(`/*traceparent='00-x-01',fencing_token='99'*/ ${sql(0)}`)
      await expect(stale).rejects.toMatchObject({ code: 'PF409' })
      expect(await hitsOf2()).toBe(20)
      expect(calls).toEqual({ templateForQuery: 1, rewriteQuery: 0 })
      // A token the helpers must judge (PF400) is rewritten differently: another template.
      const invalid = client.query(
        "/*fencing_token='abc'*/ UPDATE counters SET hits = 0 WHERE id = 2",
      )
      await expect(invalid).rejects.toMatchObject({ code: 'PF400' })
      expect(calls).toEqual({ templateForQuery: 2, rewriteQuery: 0 })
      // A URL-encoded token is read by the rewriter itself.
      await client.query("/*fencing_token='1%32%31'*/ UPDATE counters SET hits = 21 WHERE id = 2")
      expect(calls).toEqual({ templateForQuery: 2, rewriteQuery: 1 })
      expect((await direct('SELECT hits, fencing_token FROM counters WHERE id = 2')).rows).toEqual([
        { hits: 21, fencing_token: '121' },
      ])
    } finally {
      await close()
    }
  })

  test('a text that parses only with its literals in place is rewritten whole each time', async () => {
    const { client, calls, close } = await countingProxy()
    try {
      // Adjacent string constants on two lines are one constant; placeholders are not.
      const sql = `UPDATE counters SET hits = length('ab'\n'c') WHERE id = 2 /* fencing_token=122 */`
      for (let i = 0; i < 2; i++) await client.query(sql)
      expect(calls).toEqual({ templateForQuery: 1, rewriteQuery: 2 })
      expect(await hitsOf2()).toBe(3)
      const stale = client.query(sql.replace('122', '101'))
      await expect(stale).rejects.toMatchObject({ code: 'PF409' })
    } finally {
      await close()
    }
  })

  test('keeps at most its capacity, and what is used', async () => {
    const { client, calls, close } = await countingProxy(4)
    try {
      const variant = (k: number) =>
        `UPDATE counters SET hits = hits + 1 WHERE id = 2 /* fencing_token=123 */ ${'+ 0 '.repeat(k)}`
      const before = await hitsOf2()
      for (let round = 0; round < 2; round++) {
        for (let k = 0; k < 6; k++) await client.query(variant(k))
      }
      expect(calls.templateForQuery).toBe(12)
      for (let i = 0; i < 5; i++) await client.query(variant(0))
      expect(calls).toEqual({ templateForQuery: 13, rewriteQuery: 0 })
      expect(await hitsOf2()).toBe(before + 17)
    } finally {
      await close()
    }
  })
})
