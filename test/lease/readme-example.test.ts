import { execFile } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import { createTestDatabase, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { redisUrl, runSql } from './support/lease-fixtures.js'
import { readmeBlock } from '../readme/readme-blocks.js'

const run = promisify(execFile)
const repoRoot = fileURLToPath(new URL('../..', import.meta.url))
const examplePath = join(repoRoot, 'examples', 'lease.mjs')
let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('lease_readme_example')
  await runSql(
    db.url,
    `CREATE TABLE invoices (id bigint PRIMARY KEY, status text NOT NULL, fencing_token bigint NOT NULL DEFAULT 0);
     INSERT INTO invoices VALUES (99, 'PENDING', 100)`,
  )
  const config = join(inject('scratchDir'), `readme-example-${db.name}.yaml`)
  writeFileSync(config, 'fencing:\n  tables:\n    - name: invoices\n')
  await run(process.execPath, [
    inject('cliPath'),
    'migrate',
    '--config',
    config,
    '--database-url',
    db.url,
  ])
  // What `pgfence migrate --token-start 100` does: tokens start above the row's 100.
  await runSql(db.url, "SELECT setval('pgfence.token_seq', 100)")
  proxy = await startTestProxy({ fencing: { tables: [{ name: 'invoices' }] } }, db.url)
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

describe('the README lease example', () => {
  it('is examples/lease.mjs, verbatim', () => {
    expect(readmeBlock('examples/lease.mjs')).toBe(readFileSync(examplePath, 'utf8'))
  })

  it('runs as written: pays invoice 99 through pgfence with the token of its lease', async () => {
    const { stdout } = await run(process.execPath, [examplePath], {
      cwd: repoRoot,
      env: {
        ...process.env,
        DATABASE_URL: proxy.url(),
        DIRECT_DATABASE_URL: db.url,
        REDIS_URL: redisUrl(),
      },
      timeout: 30_000,
    })
    const token = /^invoice 99 paid with token (\d+)$/m.exec(stdout)?.[1]
    expect(token).toBeDefined()
    expect(BigInt(token!)).toBeGreaterThan(100n)
    const { rows } = await runSql(
      db.url,
      'SELECT status, fencing_token::text AS token FROM invoices WHERE id = 99',
    )
    expect(rows).toEqual([{ status: 'PAID', token }])
  })

  it("runs the other calls on the example's manager", async () => {
    const lease = pathToFileURL(join(repoRoot, 'dist/lease/index.js')).href
    const script = join(inject('scratchDir'), `lease-calls-${db.name}.mjs`)
    writeFileSync(
      script,
      `const { LeaseManager } = await import('${lease}')\n` +
        'const leases = new LeaseManager({ redis: process.env.REDIS_URL, tokenSource: process.env.DIRECT_DATABASE_URL })\n' +
        readmeBlock('lease-calls') +
        'console.log(JSON.stringify({ token: String(lease.token), released: await lease.release() }))\n' +
        'await leases.close()\n',
    )
    const { stdout } = await run(process.execPath, [script], {
      env: { ...process.env, DIRECT_DATABASE_URL: db.url, REDIS_URL: redisUrl() },
      timeout: 30_000,
    })
    const printed = JSON.parse(stdout) as { token: string; released: boolean }
    expect(BigInt(printed.token)).toBeGreaterThan(100n)
    // The block released the lease already: a second release finds no key of its own.
    expect(printed.released).toBe(false)
  })
})
