import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import net from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createInterface } from 'node:readline'
import pg from 'pg'
import { afterAll, beforeAll, expect, inject, test } from 'vitest'
import { runCommand } from '../e2e/support/commands.js'

let dataRoot: string
let child: ChildProcess | undefined

/** Starts `pgfence dev` and resolves with the URL it prints. */
async function startDev(dataDir: string): Promise<{ process: ChildProcess; url: string }> {
  const dev = spawn(
    process.execPath,
    [inject('cliPath'), 'dev', '--port', '0', '--admin-port', '0', '--data-dir', dataDir],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  )
  child = dev
  for await (const line of createInterface({ input: dev.stdout! })) {
    const match = /^DATABASE_URL=(postgres:\/\/\S+\/pgfence_demo)$/.exec(line)
    if (match) return { process: dev, url: match[1]! }
  }
  throw new Error('pgfence dev exited before printing its URL')
}

async function stopDev(dev: ChildProcess): Promise<number | null> {
  const exited = once(dev, 'exit')
  dev.kill('SIGINT')
  const [code] = (await exited) as [number | null]
  child = undefined
  return code
}

async function updateWithToken(url: string, token: number): Promise<number | null> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(`SET app.fencing_token = ${token}`)
    const result = await client.query("UPDATE invoices SET status = 'PAID' WHERE id = 99")
    return result.rowCount
  } finally {
    await client.end()
  }
}

beforeAll(async () => {
  // As root the embedded server runs as `postgres`, which must reach the data directory.
  dataRoot = mkdtempSync(join(tmpdir(), 'pgfence-dev-test-'))
  chmodSync(dataRoot, 0o755)
})

afterAll(async () => {
  if (child) await stopDev(child)
  if (dataRoot) rmSync(dataRoot, { recursive: true, force: true })
})

test('pgfence dev serves a fenced demo database, exits 0 on SIGINT, and reuses its data', async () => {
  const dataDir = join(dataRoot, 'postgres')
  const first = await startDev(dataDir)
  expect(await updateWithToken(first.url, 101)).toBe(1)
  await expect(updateWithToken(first.url, 100)).rejects.toMatchObject({ code: 'PF409' })
  expect(await stopDev(first.process)).toBe(0)

  // A second start finds the initialised cluster and resets the demo row to token 100.
  const second = await startDev(dataDir)
  expect(await updateWithToken(second.url, 100)).toBe(1)
  expect(await stopDev(second.process)).toBe(0)
})

test('pgfence dev on a port in use prints one line naming it and exits 1', async () => {
  const occupier = net.createServer().listen(0, '127.0.0.1')
  await once(occupier, 'listening')
  const { port } = occupier.address() as net.AddressInfo
  try {
    const dataDir = join(dataRoot, 'busy-port')
    const result = await runCommand(
      process.execPath,
      [
        inject('cliPath'),
        'dev',
        '--port',
        String(port),
        '--admin-port',
        '0',
        '--data-dir',
        dataDir,
      ],
      { timeoutMs: 60_000 },
    )
    expect(result.code).toBe(1)
    expect(result.stderr).toContain(
      `pgfence dev: cannot listen on 127.0.0.1:${port}: already in use by another process\n`,
    )
    expect(result.stderr).not.toMatch(/\n\s+at /)
  } finally {
    occupier.close()
  }
})
