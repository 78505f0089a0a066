// Objects made for each login or statement share one hidden class. V8 (11.3) makes a new one,
// which lives until a full collection, each time an object is spread and then added to, and an
// object literal with a getter becomes a dictionary: at thousands of logins a second that was
// most of what the proxy promoted to the old generation (docs/performance.md).
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { dirname, join } from 'node:path'
import { describe, expect, inject, it } from 'vitest'

/** Runs `script` (an ES module, V8's natives syntax allowed) and returns what it printed. */
async function runNatives(script: string): Promise<unknown> {
  const child = spawn(
    process.execPath,
    ['--allow-natives-syntax', '--input-type=module', '-e', script],
    {
      timeout: 30_000,
    },
  )
  let output = ''
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()))
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()))
  const [code] = (await once(child, 'exit')) as [number]
  expect(code, output).toBe(0)
  return JSON.parse(output)
}

describe('objects made per login', () => {
  it('share their hidden classes', async () => {
    const dist = (file: string) => JSON.stringify(join(dirname(dirname(inject('cliPath'))), file))
    const script = `
      import net from 'node:net'
      import { once } from 'node:events'
      import { RequestTracker } from ${dist('relay/request-progress.js')}
      import { settingsForDatabase } from ${dist('fencing/live-settings.js')}
      import { nativeRelayModule, relaySession } from ${dist('relay/native-relay.js')}

      const holder = { current: { rewriter: null, queryCache: null, config: {}, nameChecks: null } }
      const holders = [settingsForDatabase(holder, 'a'), settingsForDatabase(holder, 'b')]

      // What relaySession hands the addon, taken instead of relaying.
      const given = []
      nativeRelayModule.relay = (client, server, options) => given.push(options)
      const listener = net.createServer().listen(0, '127.0.0.1')
      await once(listener, 'listening')
      const sockets = []
      for (let i = 0; i < 4; i++) {
        const accepted = once(listener, 'connection')
        sockets.push(net.connect(listener.address().port, '127.0.0.1'), (await accepted)[0])
      }
      await Promise.all(sockets.filter((s) => s.connecting).map((s) => once(s, 'connect')))
      const hooks = () => ({
        progress: new RequestTracker().snapshot(), onMessage() {}, onServerMessage() {}, onClose() {},
      })
      for (const [client, server] of [[sockets[1], sockets[3]], [sockets[5], sockets[7]]])
        relaySession(client, server, { maxMessageBytes: 1024, interceptTypes: '' }, hooks())
      for (const socket of sockets) socket.destroy()
      listener.close()

      console.log(JSON.stringify({
        databaseSettings: %HaveSameMap(holders[0], holders[1]) && %HasFastProperties(holders[0]),
        relayOptions: given.length === 2 && %HaveSameMap(given[0], given[1]),
      }))
    `
    expect(await runNatives(script)).toEqual({
      databaseSettings: true,
      relayOptions: true,
    })
  })
})
