import { once } from 'node:events'
import { writeFileSync } from 'node:fs'
import net from 'node:net'
import { afterAll, beforeAll, expect, inject, test } from 'vitest'
import { stringify } from 'yaml'
import { runCommand } from '../e2e/support/commands.js'
import { scratchFile } from '../support/pool-auth.js'

// A port already taken is the commonest start failure: one line that names it, exit status 1.

let occupier: net.Server
let port: number

beforeAll(async () => {
  occupier = net.createServer().listen(0, '127.0.0.1')
  await once(occupier, 'listening')
  port = (occupier.address() as net.AddressInfo).port
})

afterAll(() => new Promise((resolve) => occupier?.close(resolve)))

async function start(config: object) {
  const file = scratchFile('pgfence.yaml')
  writeFileSync(file, stringify({ ...config, fencing: { tables: [{ name: 'invoices' }] } }))
  return runCommand(process.execPath, [inject('cliPath'), 'start', '--config', file], {
    timeoutMs: 20_000,
  })
}

const inUse = (port: number) =>
  `pgfence start: cannot listen on 127.0.0.1:${port}: already in use by another process\n`

test('pgfence start on a port in use prints one line naming it and exits 1', async () => {
  const result = await start({ listen: { host: '127.0.0.1', port } })
  expect(result).toMatchObject({ code: 1, stdout: '', stderr: inUse(port) })
})

test('so does an admin.listen port in use, once the proxy port was bound', async () => {
  const result = await start({
    listen: { host: '127.0.0.1', port: 0 },
    admin: { listen: { host: '127.0.0.1', port } },
  })
  expect(result).toMatchObject({ code: 1, stderr: inUse(port) })
  expect(result.stdout).not.toContain('"level":50')
})
