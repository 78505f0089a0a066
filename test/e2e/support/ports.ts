import net from 'node:net'

export { freePort } from '../../../src/dev/free-port.js'

/** Whether a connection to 127.0.0.1:`port` is refused (nothing listens there). */
function refuses(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    socket.once('connect', () => (socket.destroy(), resolve(false)))
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED'))
  })
}

/**
 * A loopback port that refuses connections for the whole run. A port that was free a moment
 * ago is not: the kernel may give it to any listener of a test running alongside. Ports below
 * 1024 it never gives to a listener that asks for any port (the ephemeral range starts far
 * above), so the first of them that refuses now stays closed. From 1000 up: fetch refuses to
 * connect to some well-known ports below (its "bad ports"), before trying.
 */
export async function closedPort(): Promise<number> {
  for (let port = 1000; port < 1024; port++) if (await refuses(port)) return port
  throw new Error('every port from 1000 to 1023 answers on 127.0.0.1')
}
