import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'
import { afterAll, beforeAll, expect, inject, test } from 'vitest'
import { createTestDatabase, queryOnce, type TestDatabase } from '../support/database.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { readmeBlock, repoRoot, runShell, shellCommands } from './readme-blocks.js'

// The README's Sequelize recipe as written: examples/sequelize.mjs, shown verbatim, and the
// steps that run it (sync() straight to PostgreSQL, pgfence migrate, a write through pgfence).

let db: TestDatabase
let proxy: TestProxy

beforeAll(async () => {
  db = await createTestDatabase('readme_sequelize')
  const sample = parse(readFileSync(join(repoRoot, 'config/pgfence.yaml'), 'utf8'))
  proxy = await startTestProxy({ fencing: sample.fencing }, db.url)
})

afterAll(async () => {
  await proxy?.close()
  await db?.drop()
})

test('the README shows examples/sequelize.mjs as it is', () => {
  const file = readFileSync(join(repoRoot, 'examples/sequelize.mjs'), 'utf8')
  expect(readmeBlock('examples/sequelize.mjs')).toBe(file)
})

test('sync, migrate and pay: the row Sequelize creates gets the lease token', async () => {
  const env = {
    DIRECT_DATABASE_URL: db.url,
    DATABASE_URL: proxy.url(),
    REDIS_URL: inject('redisUrl'),
  }
  const results = []
  for (const command of shellCommands(readmeBlock('sequelize-steps')))
    results.push(await runShell(command, env))
  for (const result of results) expect(result, result.stderr).toMatchObject({ code: 0 })
  const { rows } = await queryOnce(db.url, 'SELECT status, fencing_token FROM invoices')
  expect(rows).toHaveLength(1)
  expect(results[1]!.stdout).toContain('invoices.fencing_token: set DEFAULT 0, NOT NULL')
  expect(results[2]!.stdout.trim()).toBe(
    `invoice 99 ${rows[0].status} with token ${rows[0].fencing_token}`,
  )
  expect(rows[0]).toMatchObject({ status: 'PAID' })
  expect(BigInt(rows[0].fencing_token)).toBeGreaterThan(0n)
})
