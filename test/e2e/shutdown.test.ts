import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import pg from 'pg'
import { afterAll, beforeAll, expect, inject, test } from 'vitest'
import { stringify } from 'yaml'
import { adminQuery, createTestDatabase, type TestDatabase } from '../support/database.js'
import { waitFor } from './support/wait.js'

let db: TestDatabase
let configDir: string

beforeAll(async () => {
  db = await createTestDatabase('e2e_shutdown')
  configDir = mkdtempSync(join(tmpdir(), 'pgfence-shutdown-'))
})

afterAll(async () => {
  await db?.drop()
  if (configDir) rmSync(configDir, { recursive: true, force: true })
})

/** Starts `pgfence start` and resolves with the port from its 'listening' log line. */
async function startCli(configFile: string): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, [inject('cliPath'), 'start', '--config', configFile], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const lines = createInterface({ input: child.stdout! })
  for await (const line of lines) {
    const entry = JSON.parse(line) as { msg?: string; port?: number }
    if (entry.msg === 'pgfence listening' && entry.port) return { child, port: entry.port }
  }
  throw new Error('pgfence start exited before listening')
}

test('SIGTERM with an idle session open exits 0 and leaves no upstream connection', async () => {
  const configFile = join(configDir, 'shutdown.yaml')
  writeFileSync(
    configFile,
    stringify({
      listen: { host: '127.0.0.1', port: 0 },
      upstream: { host: db.host, port: db.port },
      limits: { shutdownTimeoutMs: 1000 },
    }),
  )
  const { child, port } = await startCli(configFile)
  const applicationName = `pgfence-e2e-sigterm-${process.pid}`
  const url = new URL(db.url)
  url.port = String(port)
  const client = new pg.Client({
    connectionString: url.toString(),
    application_name: applicationName,
  })
  client.on('error', () => {}) // the proxy ends the idle session while draining
  await client.connect()
  await client.query('SELECT 1')
  const upstreamSessions = async (): Promise<number> =>
    (
      await adminQuery(
        `SELECT 1 FROM pg_stat_activity WHERE application_name = '${applicationName}'`,
      )
    ).rows.length
  expect(await upstreamSessions()).toBe(1)

  const exited = once(child, 'exit')
  child.kill('SIGTERM')
  const [code, signal] = await exited
  expect({ code, signal }).toEqual({ code: 0, signal: null })
  await waitFor(async () => (await upstreamSessions()) === 0, {
    timeoutMs: 5000,
    what: 'the upstream session to end',
  })
  await client.end().catch(() => {})
})
