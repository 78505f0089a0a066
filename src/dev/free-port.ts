import { once } from 'node:events'
import net from 'node:net'

/** A loopback port that was free a moment ago: nothing listens on it until someone binds it. */
export async function freePort(): Promise<number> {
  const server = net.createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const { port } = server.address() as net.AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}
