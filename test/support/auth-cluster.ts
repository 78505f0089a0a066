import { appendFileSync, chmodSync, chownSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { freePort } from '../e2e/support/ports.js'
import { scratchFile } from './pool-auth.js'

/** Login roles of the cluster, one per authentication method, each with its password. */
export const authUsers = {
  scram: { user: 'scram_user', password: 'scram-secret' },
  md5: { user: 'md5_user', password: 'md5-secret' },
  trust: { user: 'trust_user', password: '' },
} as const

export interface AuthCluster {
  host: string
  port: number
  /** Self-signed certificate the server presents (CN localhost, SAN localhost and 127.0.0.1). */
  certFile: string
  keyFile: string
  /** Superuser (trust) URL. */
  superuserUrl: string
  url(user: string, password?: string, database?: string): string
  stop(): Promise<void>
}

const hbaRules = `
local all all trust
host all ${authUsers.scram.user} 127.0.0.1/32 scram-sha-256
host all ${authUsers.md5.user} 127.0.0.1/32 md5
host all ${authUsers.trust.user} 127.0.0.1/32 trust
host all postgres 127.0.0.1/32 trust
`

const runningAsRoot = process.getuid?.() === 0

/** initdb and postgres refuse to run as root, so as root they run as the OS user postgres. */
export async function runAsClusterOwner(binary: string, args: string[]): Promise<void> {
  const [command, fullArgs] = runningAsRoot
    ? ['runuser', ['-u', 'postgres', '--', pgBin(binary), ...args]]
    : [pgBin(binary), args]
  const result = await runCommand(command, fullArgs)
  if (result.code !== 0) {
    throw new Error(`${binary} failed (${result.code}): ${result.stderr}${result.stdout}`)
  }
}

export interface CertFiles {
  certFile: string
  keyFile: string
}

/** A self-signed certificate for CN localhost, valid for localhost and 127.0.0.1, written to `dir`. */
export async function createSelfSignedCert(dir: string): Promise<CertFiles> {
  const certFile = join(dir, 'server.crt')
  const keyFile = join(dir, 'server.key')
  const result = await runCommand('openssl', [
    'req', '-x509', '-nodes', '-days', '2',
    '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
    '-keyout', keyFile, '-out', certFile,
    '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
  ]) // prettier-ignore
  if (result.code !== 0) throw new Error(`openssl failed: ${result.stderr}`)
  chmodSync(keyFile, 0o600)
  return { certFile, keyFile }
}

interface OsIds {
  uid: number
  gid: number
}

async function postgresOsIds(): Promise<OsIds> {
  const [uid, gid] = await Promise.all(
    ['-u', '-g'].map(async (flag) => Number((await runCommand('id', [flag, 'postgres'])).stdout)),
  )
  return { uid, gid }
}

/** The server reads its directory, certificate and key as the OS user it runs as. */
export async function giveToClusterOwner(paths: string[]): Promise<void> {
  if (!runningAsRoot) return
  const { uid, gid } = await postgresOsIds()
  for (const path of paths) chownSync(path, uid, gid)
}

async function createRoles(superuserUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: superuserUrl })
  await client.connect()
  try {
    await client.query(
      `CREATE ROLE ${authUsers.scram.user} LOGIN PASSWORD '${authUsers.scram.password}'`,
    )
    // md5 roles need an md5 hash stored, so the hash method is switched before the password is set.
    await client.query(`SET password_encryption = md5`)
    await client.query(
      `CREATE ROLE ${authUsers.md5.user} LOGIN PASSWORD '${authUsers.md5.password}'`,
    )
    await client.query(`CREATE ROLE ${authUsers.trust.user} LOGIN`)
  } finally {
    await client.end()
  }
}

/** A throwaway PostgreSQL cluster with TLS and one role per password method; stop() removes it. */
export async function startAuthCluster(): Promise<AuthCluster> {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-auth-cluster-'))
  const dataDir = join(dir, 'data')
  const port = await freePort()
  const { certFile, keyFile } = await createSelfSignedCert(dir)
  await giveToClusterOwner([dir, certFile, keyFile])
  await runAsClusterOwner('initdb', [
    '-D',
    dataDir,
    '-U',
    'postgres',
    '--auth=trust',
    '-E',
    'UTF8',
    '--no-sync',
  ])
  appendFileSync(
    join(dataDir, 'postgresql.conf'),
    [
      `port = ${port}`,
      `listen_addresses = '127.0.0.1'`,
      `unix_socket_directories = '${dir}'`,
      `max_connections = 150`,
      `ssl = on`,
      `ssl_cert_file = '${certFile}'`,
      `ssl_key_file = '${keyFile}'`,
      `fsync = off`,
      `synchronous_commit = off`,
      `full_page_writes = off`,
      '',
    ].join('\n'),
  )
  writeFileSync(join(dataDir, 'pg_hba.conf'), hbaRules)
  await runAsClusterOwner('pg_ctl', ['-D', dataDir, '-l', join(dir, 'server.log'), '-w', 'start'])
  const host = '127.0.0.1'
  const url = (user: string, password = '', database = 'postgres'): string => {
    const credentials = password ? `${user}:${encodeURIComponent(password)}` : user
    return `postgres://${credentials}@${host}:${port}/${database}`
  }
  const superuserUrl = url('postgres')
  await createRoles(superuserUrl)
  return {
    host,
    port,
    certFile,
    keyFile,
    superuserUrl,
    url,
    stop: async () => {
      await runAsClusterOwner('pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', 'stop'])
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** A userlist of the secrets the cluster stores, as PgBouncer's userlist holds them, and `extra`. */
export async function writeClusterUserlist(cluster: AuthCluster, extra: string[] = []) {
  const client = new pg.Client({ connectionString: cluster.superuserUrl })
  await client.connect()
  const { rows } = await client.query(
    'SELECT rolname, rolpassword FROM pg_authid WHERE rolpassword IS NOT NULL',
  )
  await client.end()
  const file = scratchFile('userlist.txt')
  writeFileSync(
    file,
    [...rows.map((row) => `"${row.rolname}" "${row.rolpassword}"`), ...extra, ''].join('\n'),
  )
  return file
}
