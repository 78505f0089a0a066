import { appendFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { freePort } from '../e2e/support/ports.js'
import { waitFor } from '../e2e/support/wait.js'
import { giveToClusterOwner, runAsClusterOwner } from './auth-cluster.js'

/** One PostgreSQL node of a ReplicaPair. */
export interface PairNode {
  port: number
  /** `127.0.0.1:port`, as upstream.hosts lists it. */
  hostPort: string
  url: string
  /** pg_ctl stop -m immediate: the node vanishes as in a crash. */
  crash(): Promise<void>
  promote(): Promise<void>
  /** The server's log so far. */
  log(): string
}

export interface ReplicaPair {
  primary: PairNode
  standby: PairNode
  /** Stops both nodes (whatever state they are in) and removes their directories. */
  remove(): Promise<void>
}

const settings = (port: number, dir: string) =>
  [
    `port = ${port}`,
    `listen_addresses = '127.0.0.1'`,
    `unix_socket_directories = '${dir}'`,
    `wal_level = replica`,
    `max_wal_senders = 4`,
    `hot_standby = on`,
    `fsync = off`,
    `full_page_writes = off`,
    '',
  ].join('\n')

/**
 * A primary and a streaming standby made from its base backup, on free loopback ports in a
 * temp dir (trust auth, superuser postgres), so that a test may crash one and promote the other.
 */
export async function startReplicaPair(
  label: string,
  primarySettings: string[] = [],
): Promise<ReplicaPair> {
  const dir = mkdtempSync(join(tmpdir(), `pgfence-${label}-`))
  await giveToClusterOwner([dir])
  const started: string[] = []
  const node = (name: string, port: number): PairNode & { dataDir: string } => {
    const dataDir = join(dir, name)
    return {
      dataDir,
      port,
      hostPort: `127.0.0.1:${port}`,
      url: `postgres://postgres@127.0.0.1:${port}/postgres`,
      crash: () => runAsClusterOwner('pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', 'stop']),
      promote: () => runAsClusterOwner('pg_ctl', ['-D', dataDir, '-w', 'promote']),
      log: () => readFileSync(`${dataDir}.log`, 'utf8'),
    }
  }
  const start = async (dataDir: string) => {
    await runAsClusterOwner('pg_ctl', ['-D', dataDir, '-l', `${dataDir}.log`, '-w', 'start'])
    started.push(dataDir)
  }
  const remove = async () => {
    for (const dataDir of started)
      await runAsClusterOwner('pg_ctl', ['-D', dataDir, '-m', 'immediate', 'stop']).catch(() => {})
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    const [primaryPort, standbyPort] = [await freePort(), await freePort()]
    const primary = node('primary', primaryPort)
    const standby = node('standby', standbyPort)
    await runAsClusterOwner('initdb', [
      '-D',
      primary.dataDir,
      '-U',
      'postgres',
      '--auth=trust',
      '--no-sync',
    ])
    appendFileSync(
      join(primary.dataDir, 'postgresql.conf'),
      settings(primaryPort, dir) + primarySettings.join('\n') + '\n',
    )
    await start(primary.dataDir)
    await runAsClusterOwner('pg_basebackup', [
      ...['-h', '127.0.0.1', '-p', String(primaryPort), '-U', 'postgres'],
      ...['-D', standby.dataDir, '-R', '-X', 'stream', '--no-sync'],
    ])
    appendFileSync(join(standby.dataDir, 'postgresql.conf'), settings(standbyPort, dir))
    await start(standby.dataDir)
    await untilStreaming(primary.url)
    return { primary, standby, remove }
  } catch (err) {
    await remove()
    throw err
  }
}

/** Waits (bounded) until the primary has a streaming standby. */
async function untilStreaming(url: string): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await waitFor(
      async () =>
        (await client.query(`SELECT 1 FROM pg_stat_replication WHERE state = 'streaming'`))
          .rowCount! > 0,
      { what: 'the standby to stream' },
    )
  } finally {
    await client.end()
  }
}
