// Poll handles kept by descriptor number (src/native/poll-park.c): a socket that gets the
// number a closed one left is watched by that one's handle, and must be watched as a new
// handle would watch it; a worker thread's kept handles go with its environment, else Node
// aborts as the thread's loop closes with handles open.
import { once } from 'node:events'
import net from 'node:net'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { nativeAddon } from '../../src/native-addon.js'
import { descriptorOf, stopReading } from '../../src/net/socket-handle.js'

interface LinkAddon {
  linkWatch(fd: number, onEvent: () => void): object
  linkClose(link: object): void
}

const addonPath =
  process.env.PGFENCE_NATIVE_ADDON ||
  fileURLToPath(new URL('../../build/Release/pgfence_relay.node', import.meta.url))

/** Connects to `port` and hands back both ends. */
async function pair(listener: net.Server): Promise<[net.Socket, net.Socket]> {
  const accepted = once(listener, 'connection') as Promise<[net.Socket]>
  const { port } = listener.address() as net.AddressInfo
  const client = net.connect(port, '127.0.0.1')
  await once(client, 'connect')
  const [server] = await accepted
  return [client, server]
}

/**
 * The worker: watches the client end of `rounds` connections in C one after another, each link
 * closed before the next (its handle kept for the next descriptor with its number), then ends.
 */
const workerScript = `
const { parentPort, workerData } = require('node:worker_threads')
const net = require('node:net')
const { once } = require('node:events')
const addon = require(workerData.addon)
;(async () => {
  const listener = net.createServer((socket) => socket.on('error', () => {}))
  listener.listen(0, '127.0.0.1')
  await once(listener, 'listening')
  for (let i = 0; i < workerData.rounds; i++) {
    const client = net.connect(listener.address().port, '127.0.0.1')
    await once(client, 'connect')
    client.pause()
    client._handle.readStop()
    addon.linkClose(addon.linkWatch(client._handle.fd, () => {}))
    client.destroy()
    await new Promise((resolve) => setImmediate(resolve))
  }
  listener.close()
  parentPort.postMessage('watched')
})()
`

describe.runIf(nativeAddon)('poll handles kept by descriptor number', () => {
  const addon = nativeAddon as unknown as LinkAddon
  let listener: net.Server

  beforeAll(async () => {
    listener = net.createServer((socket) => socket.on('error', () => {}))
    listener.listen(0, '127.0.0.1')
    await once(listener, 'listening')
  })

  afterAll(() => listener.close())

  it('a socket given a closed one’s number is watched: its peer’s bytes reach C', async () => {
    let heard = 0
    for (let i = 0; i < 20; i++) {
      const [client, server] = await pair(listener)
      stopReading(client)
      const event = new Promise<void>((resolve) => addon.linkWatch(descriptorOf(client)!, resolve))
      server.write('x')
      await event
      heard++
      client.destroy()
      server.destroy()
      await once(client, 'close')
    }
    expect(heard).toBe(20)
  })

  it('a worker thread that watched sockets in C ends cleanly, its kept handles closed', async () => {
    const worker = new Worker(workerScript, {
      eval: true,
      workerData: { addon: addonPath, rounds: 10 },
    })
    const [message] = await once(worker, 'message')
    expect(message).toBe('watched')
    const [code] = await once(worker, 'exit')
    expect(code).toBe(0)
  })
})
