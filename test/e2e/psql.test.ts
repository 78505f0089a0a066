import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { once } from 'node:events'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { poolUnderTest, startTestProxy, type TestProxy } from '../support/proxy.js'
import { pgBin, runCommand, type CommandResult } from './support/commands.js'

let db: TestDatabase
let proxy: TestProxy
let workDir: string

beforeAll(async () => {
  db = await createTestDatabase('e2e_psql')
  proxy = await startTestProxy({}, db.url)
  workDir = mkdtempSync(join(tmpdir(), 'pgfence-psql-'))
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
  rmSync(workDir, { recursive: true, force: true })
})

function psql(url: string, args: string[], input?: string): Promise<CommandResult> {
  return runCommand(pgBin('psql'), ['--no-psqlrc', '-X', '-q', '-At', '-d', url, ...args], {
    input,
    env: { PGCONNECT_TIMEOUT: '5' },
  })
}

describe('psql through the proxy', () => {
  test('-c runs a statement and prints its result', async () => {
    const result = await psql(proxy.url(), ['-c', "SELECT 40 + 2, 'through the proxy'"])
    expect(result).toMatchObject({ code: 0, stdout: '42|through the proxy\n', stderr: '' })
  })

  test('a script copies rows in and out with \\copy and COPY STDIN/STDOUT', async () => {
    const source = join(workDir, 'source.tsv')
    const exported = join(workDir, 'exported.tsv')
    const rows = Array.from({ length: 500 }, (_, i) => `${i}\trow ${i}`).join('\n') + '\n'
    await runCommand('sh', ['-c', `cat > '${source}'`], { input: rows })
    const script = [
      'CREATE TABLE copied (id int PRIMARY KEY, label text);',
      `\\copy copied FROM '${source}'`,
      'COPY copied FROM STDIN;',
      '1000\tfrom stdin',
      '1001\talso from stdin',
      '\\.',
      `\\copy (SELECT * FROM copied ORDER BY id) TO '${exported}'`,
      'COPY (SELECT count(*), max(id) FROM copied) TO STDOUT;',
    ].join('\n')
    const result = await psql(proxy.url(), ['-v', 'ON_ERROR_STOP=1'], script)
    expect(result.stderr).toBe('')
    expect(result.code).toBe(0)
    expect(result.stdout).toBe('502\t1001\n')
    const expected = rows + '1000\tfrom stdin\n1001\talso from stdin\n'
    expect(readFileSync(exported, 'utf8')).toBe(expected)
  })

  test('a NOTIFY sent with psql reaches a client listening through the proxy', async () => {
    const listener = new pg.Client({ connectionString: proxy.url() })
    await listener.connect()
    try {
      // Transaction pooling cannot keep a listener's connection (README, Pooling): refused.
      if (poolUnderTest() === 'transaction') {
        await expect(listener.query('LISTEN pgfence_e2e')).rejects.toMatchObject({ code: '0A000' })
        const sent = await psql(proxy.url(), ['-c', "NOTIFY pgfence_e2e, 'hello from psql'"])
        expect(sent.code).toBe(0)
        return
      }
      await listener.query('LISTEN pgfence_e2e')
      const received = once(listener, 'notification')
      const result = await psql(proxy.url(), ['-c', "NOTIFY pgfence_e2e, 'hello from psql'"])
      expect(result.code).toBe(0)
      const [notification] = (await received) as [pg.Notification]
      expect(notification).toMatchObject({ channel: 'pgfence_e2e', payload: 'hello from psql' })
    } finally {
      await listener.end()
    }
  })

  test('ON_ERROR_STOP stops a script at the first error with exit code 3', async () => {
    const script = [
      '\\set ON_ERROR_STOP on',
      'CREATE TABLE before_error (id int);',
      'SELECT no_such_column FROM before_error;',
      'CREATE TABLE after_error (id int);',
    ].join('\n')
    const result = await psql(proxy.url(), [], script)
    expect(result.code).toBe(3)
    expect(result.stderr).toContain('column "no_such_column" does not exist')
    const tables = await psql(proxy.url(), [
      '-c',
      "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class WHERE relname LIKE '%_error'",
    ])
    expect(tables.stdout).toBe('before_error\n')
  })

  test('an error reaches psql exactly as PostgreSQL reports it', async () => {
    const script = ['\\set VERBOSITY verbose', 'SELECT 1 / 0;'].join('\n')
    const direct = await psql(db.url, [], script)
    const proxied = await psql(proxy.url(), [], script)
    expect(proxied.stderr).toContain('ERROR:  22012: division by zero')
    expect(proxied).toEqual(direct)
  })
})
