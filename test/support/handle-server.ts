import net from 'node:net'
import { once } from 'node:events'
import { acceptClients, type ClientConnection } from '../../src/client/client-connection.js'

/** A listener that accepts clients as the proxy does for a login in C: with no Node socket. */
export interface HandleServer {
  port: number
  /** The next client accepted, in order. */
  next(): Promise<ClientConnection>
  close(): Promise<void>
}

export async function listenForHandles(): Promise<HandleServer> {
  const server = net.createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const accepted: ClientConnection[] = []
  const waiting: ((connection: ClientConnection) => void)[] = []
  acceptClients(
    server,
    true,
    (connection, started) => {
      if (started) throw new Error('a client accepted for a login in C started reading')
      const waiter = waiting.shift()
      if (waiter) waiter(connection)
      else accepted.push(connection)
    },
    true,
  )
  return {
    port: (server.address() as net.AddressInfo).port,
    next: () =>
      new Promise((resolve) => {
        const connection = accepted.shift()
        if (connection) resolve(connection)
        else waiting.push(resolve)
      }),
    close: async () => {
      server.close()
      await once(server, 'close')
    },
  }
}
