import net from 'node:net'

/** A TCP relay to a store that can stop answering: requests go out, nothing comes back. */
export async function startFreezableProxy(target: URL) {
  let frozen = false
  const sockets = new Set<net.Socket>()
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname)
    sockets.add(client).add(upstream)
    client.on('data', (chunk) => upstream.write(chunk))
    upstream.on('data', (chunk) => frozen || client.write(chunk))
    const closeBoth = () => {
      client.destroy()
      upstream.destroy()
    }
    client.on('close', closeBoth).on('error', closeBoth)
    upstream.on('close', closeBoth).on('error', closeBoth)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as net.AddressInfo
  // The target's URL (scheme, user, database) with the relay's address in place of the target's.
  const url = new URL(target)
  url.host = `127.0.0.1:${port}`
  return {
    url: url.toString(),
    freeze: () => void (frozen = true),
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => server.close(resolve))
    },
  }
}
