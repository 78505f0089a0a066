import net from 'node:net'
import { once } from 'node:events'
import { afterEach, describe, expect, test } from 'vitest'
import { defaultConfig } from '../../src/config/load.js'
import { ServerConnection } from '../../src/pool/server-connection.js'
import { UpstreamNode } from '../../src/upstream/upstream-node.js'

const message = (type: string, body: number[]): Buffer => {
  const head = Buffer.alloc(5)
  head.write(type, 0, 'latin1')
  head.writeInt32BE(body.length + 4, 1)
  return Buffer.concat([head, Buffer.from(body)])
}
/** AuthenticationOk, BackendKeyData, ReadyForQuery: a trusting server's whole login answer. */
const LOGIN_ANSWER = Buffer.concat([
  message('R', [0, 0, 0, 0]),
  message('K', [0, 0, 0, 42, 0, 0, 0, 7]),
  message('Z', [0x49]),
])

const cleanups: (() => void)[] = []
afterEach(() => cleanups.splice(0).forEach((cleanup) => cleanup()))

/** A server connection to a stand-in that logs in anyone and never answers a statement. */
async function silentServer(): Promise<ServerConnection> {
  const sockets: net.Socket[] = []
  const listener = net.createServer((socket) => {
    sockets.push(socket)
    socket.once('data', () => socket.write(LOGIN_ANSWER))
  })
  listener.listen(0, '127.0.0.1')
  await once(listener, 'listening')
  const { port } = listener.address() as net.AddressInfo
  const config = defaultConfig()
  const node = new UpstreamNode(
    { ...config.upstream, host: '127.0.0.1', port, tls: 'disable' },
    true,
  )
  const connection = await ServerConnection.open(node, config.tcpKeepalive, 'app', 'appdb', {
    password: 'unused',
  })
  cleanups.push(() => {
    connection.destroy()
    for (const socket of sockets) socket.destroy()
    listener.close()
  })
  return connection
}

describe('server connection', () => {
  test("pgfence's own statement unanswered in time rejects, and the connection is not reused", async () => {
    const connection = await silentServer()
    const started = Date.now()
    await expect(connection.within(200, (c) => c.run('SELECT 1'))).rejects.toThrow(
      'the server did not answer within 200 ms',
    )
    expect(Date.now() - started).toBeGreaterThanOrEqual(190)
    expect(await connection.reset(false, 5000)).toBe(false)
  })
})
