import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { createTestDatabase, queryOnce, type TestDatabase } from '../support/database.js'
import {
  readmeBlock,
  runShell,
  shellCommands,
  startInBackground,
  type Background,
} from './readme-blocks.js'

// The README's quick start, run as written: its commands name 127.0.0.1:6432 and :9930, so the
// steps run one after the other in this file, and nothing else in the suite listens there.

const demoUrl = 'postgres://postgres:postgres@127.0.0.1:6432/pgfence_demo'

async function writeWithToken(url: string, token: number, status: string): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(`SET app.fencing_token = ${token}`)
    await client.query('UPDATE invoices SET status = $1 WHERE id = 99', [status])
  } finally {
    await client.end()
  }
}

describe('npm start and what the README tries on it', () => {
  let server: Background | undefined
  let staleWrites = 0

  beforeAll(async () => {
    const [command] = shellCommands(readmeBlock('npm-start'))
    server = startInBackground(command!)
    await server.lineMatching(/^DATABASE_URL=/)
  })

  afterAll(async () => {
    await server?.stop('SIGINT')
  })

  test('the try-it: the first write commits, the stale one gets PF409', async () => {
    const [fresh, stale] = shellCommands(readmeBlock('try-it'))
    const first = await runShell(fresh!)
    expect(first).toMatchObject({ code: 0 })
    expect(first.stdout).toContain('UPDATE 1')
    const second = await runShell(stale!)
    expect(second.code).toBe(1)
    expect(second.stderr).toContain('ERROR:  stale fencing token')
    expect(second.stdout).not.toContain('UPDATE')
    staleWrites++
  })

  test("the Why section's SQL: the same token commits, and after token 102 it is stale", async () => {
    const [before, after] = readmeBlock('why').split(/^-- \.\.\. later.*$/m)
    const holder = new pg.Client({ connectionString: demoUrl })
    await holder.connect()
    try {
      for (const statement of before!.split(';').slice(0, -1)) await holder.query(statement)
      await writeWithToken(demoUrl, 102, 'PAID')
      await expect(holder.query(after!.split(';')[0]!)).rejects.toMatchObject({ code: 'PF409' })
      staleWrites++
    } finally {
      await holder.end()
    }
  })

  test('the console and the metrics count the stale writes', async () => {
    const [showFencing, metrics] = shellCommands(readmeBlock('console-and-metrics'))
    const fencing = await runShell(showFencing!)
    expect(fencing).toMatchObject({ code: 0 })
    expect(fencing.stdout).toMatch(/invoices/)
    const scraped = await runShell(metrics!)
    expect(scraped).toMatchObject({ code: 0 })
    expect(scraped.stdout).toContain(
      `pgfence_fencing_rejections_total{code="PF409",table="public.invoices"} ${staleWrites}`,
    )
  })
})

describe('in front of your own database', () => {
  let database: TestDatabase
  let proxy: Background | undefined

  beforeAll(async () => {
    database = await createTestDatabase('readme_own')
    await queryOnce(
      database.url,
      "CREATE TABLE invoices (id int PRIMARY KEY, status text); INSERT INTO invoices VALUES (99, 'PENDING')",
    )
  })

  afterAll(async () => {
    await proxy?.stop('SIGTERM')
    await database?.drop()
  })

  test('migrate, then start with the sample config: writes through it are fenced', async () => {
    const env = { DIRECT_DATABASE_URL: database.url }
    const [migrate, start] = shellCommands(readmeBlock('own-database'))
    const migrated = await runShell(migrate!, env)
    expect(migrated, migrated.stderr).toMatchObject({ code: 0 })
    proxy = startInBackground(start!, env)
    await proxy.lineMatching(/pgfence listening/)
    const url = `postgres://postgres@127.0.0.1:6432/${database.name}`
    await writeWithToken(url, 5, 'PAID')
    await expect(writeWithToken(url, 4, 'VOID')).rejects.toMatchObject({ code: 'PF409' })
    const { rows } = await queryOnce(database.url, 'SELECT status, fencing_token FROM invoices')
    expect(rows).toEqual([{ status: 'PAID', fencing_token: '5' }])
    // npx dies of the signal; pgfence itself drains and says so.
    expect(await proxy.stop('SIGTERM')).toMatch(/"msg":"stopped"/)
    proxy = undefined
  })
})
