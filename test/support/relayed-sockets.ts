import net from 'node:net'
import { once } from 'node:events'
import {
  relaySession,
  type NativeRelay,
  type NativeRelaySettings,
  type RelayHooks,
  type SocketsAfterRelay,
} from '../../src/relay/native-relay.js'
import { RequestTracker } from '../../src/relay/request-progress.js'

/**
 * Two loopback connections with a native relay between them, the test playing both outer ends:
 * what `client` writes reaches `server` through the relay, and the other way round.
 */
export interface RelayedSockets {
  native: NativeRelay
  client: net.Socket
  server: net.Socket
  /** The proxy's end of the server connection, as a pooled server connection's socket. */
  proxyServer: net.Socket
  /** Stops the relay and destroys every socket, the relay's own two (the proxy's ends) too. */
  close(): void
}

/** A connected pair through `listener`: [the outer end, the accepted end]. */
async function loopback(listener: net.Server): Promise<[net.Socket, net.Socket]> {
  const { port } = listener.address() as net.AddressInfo
  const accepted = once(listener, 'connection') as Promise<[net.Socket]>
  const outer = net.connect(port, '127.0.0.1')
  await once(outer, 'connect')
  return [outer, (await accepted)[0]]
}

export async function relayedSockets(
  listener: net.Server,
  settings: Partial<NativeRelaySettings> = {},
  hooks: Partial<RelayHooks> = {},
  sockets: SocketsAfterRelay = {},
): Promise<RelayedSockets> {
  const [client, clientSide] = await loopback(listener)
  const [serverSide, server] = await loopback(listener)
  const native = relaySession(
    clientSide,
    serverSide,
    { maxMessageBytes: 1 << 20, interceptTypes: '', ...settings },
    {
      progress: new RequestTracker().snapshot(),
      onMessage: () => undefined,
      onServerMessage: () => undefined,
      onClose: () => {},
      ...hooks,
    },
    sockets,
  )
  if (!native) throw new Error('the native relay did not take the sockets')
  return {
    native,
    client,
    server,
    proxyServer: serverSide,
    close() {
      native.stop()
      for (const socket of [client, server, clientSide, serverSide]) socket.destroy()
    },
  }
}
