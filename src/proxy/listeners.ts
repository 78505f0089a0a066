import net from 'node:net'
import { chmodSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Config } from '../config/schema.js'
import type { Logger } from '../log.js'

export interface Listeners {
  servers: net.Server[]
  /** The TCP port bound (listen.port, or the one the OS chose for 0). */
  port: number
  socketPath?: string
  /** Stops accepting on every listener; the socket file is removed. */
  close(): Promise<void>
}

/** Binds `server`; a failure (the port in use) rejects, and is not logged here: the caller says it. */
function listen(
  server: net.Server,
  logger: Logger,
  ...args: [number, string] | [string]
): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen(...(args as [number, string]), () => {
      server.off('error', reject)
      server.on('error', (err) => logger.error({ err }, 'listener error'))
      resolve()
    })
  })
}

/** TCP on listen.host:port and, with listen.unixSocketDir, `<dir>/.s.PGSQL.<port>` as PostgreSQL names it. */
export async function listenAll(config: Config['listen'], logger: Logger): Promise<Listeners> {
  const tcp = net.createServer()
  await listen(tcp, logger, config.port, config.host)
  const { port } = tcp.address() as net.AddressInfo
  logger.info({ host: config.host, port }, 'pgfence listening')
  const servers = [tcp]
  let socketPath: string | undefined
  if (config.unixSocketDir) {
    socketPath = join(config.unixSocketDir, `.s.PGSQL.${port}`)
    // A file left by a proxy that did not exit cleanly would make listen fail.
    rmSync(socketPath, { force: true })
    const unix = net.createServer()
    await listen(unix, logger, socketPath).catch((err: unknown) => {
      tcp.close()
      throw err
    })
    // Like PostgreSQL's default unix_socket_permissions: access is the login's business.
    chmodSync(socketPath, 0o777)
    logger.info({ path: socketPath }, 'pgfence listening on a Unix socket')
    servers.push(unix)
  }
  return {
    servers,
    port,
    socketPath,
    close: async () => {
      await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))))
      if (socketPath) rmSync(socketPath, { force: true })
    },
  }
}
