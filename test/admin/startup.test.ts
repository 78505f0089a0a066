import { Writable } from 'node:stream'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pino } from 'pino'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { createSelfSignedCert } from '../support/auth-cluster.js'
import { startTestProxy } from '../support/proxy.js'
import { connectRaw, sslRequest, startupMessage } from '../e2e/support/wire.js'
import { writeUserlist } from '../support/pool-auth.js'
import { waitFor } from '../e2e/support/wait.js'

let dir: string

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'pgfence-startup-'))
})

afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true })
})

test('with client TLS, a client that leaves mid-handshake is done with at once, not timed out later', async () => {
  const { certFile, keyFile } = await createSelfSignedCert(dir)
  const messages: string[] = []
  const sink = new Writable({
    write(line: Buffer, _encoding, done) {
      messages.push((JSON.parse(line.toString()) as { msg: string }).msg)
      done()
    },
  })
  const proxy = await startTestProxy(
    { tls: { cert: certFile, key: keyFile }, limits: { startupTimeoutMs: 60_000 } },
    undefined,
    { logger: pino({ level: 'debug' }, sink) },
  )
  try {
    const socket = await connectRaw(proxy.port)
    socket.write(sslRequest())
    await new Promise((resolve) => socket.once('data', resolve))
    socket.destroy()
    await waitFor(() => messages.includes('connection closed during startup'), {
      what: 'the proxy to see the client leave',
    })
    expect(messages).not.toContain('startup not completed in time')
  } finally {
    await proxy.close()
  }
})

test('a pooled client that leaves during its login in C: one debug line, with its connection, and nothing at info', async () => {
  const lines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(line: Buffer, _encoding, done) {
      lines.push(JSON.parse(line.toString()) as Record<string, unknown>)
      done()
    },
  })
  const pooled = { pool: { mode: 'session' as const, size: 1 }, auth: { file: writeUserlist() } }
  const leave = async (level: string) => {
    const proxy = await startTestProxy({ ...pooled, relay: 'native' }, undefined, {
      logger: pino({ level }, sink),
    })
    try {
      const socket = await connectRaw(proxy.port)
      socket.write(startupMessage('postgres', 'postgres'))
      await new Promise((resolve) => socket.once('data', resolve))
      socket.destroy()
      await waitFor(() => proxy.connectionCount() === 0, { what: 'the proxy to see it leave' })
    } finally {
      await proxy.close()
    }
  }
  await leave('info')
  expect(lines.filter((line) => 'conn' in line)).toEqual([])
  await leave('debug')
  expect(lines.filter((line) => 'conn' in line)).toEqual([
    expect.objectContaining({
      msg: 'connection closed during startup',
      err: 'client closed the connection during authentication',
      conn: 1,
      peer: expect.stringMatching(/^127\.0\.0\.1:\d+$/),
    }),
  ])
})
