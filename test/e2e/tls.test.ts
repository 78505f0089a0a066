import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import type { TLSSocket } from 'node:tls'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import {
  authUsers,
  createSelfSignedCert,
  startAuthCluster,
  type AuthCluster,
  type CertFiles,
} from '../support/auth-cluster.js'
import {
  relayUnderTest,
  startTestProxy,
  type ConfigOverrides,
  type TestProxy,
} from '../support/proxy.js'
import { writeUserlist } from '../support/pool-auth.js'
import { pgBin, runCommand } from './support/commands.js'

let cluster: AuthCluster
let workDir: string
let proxyCert: CertFiles
let strangerCert: CertFiles
const proxies: TestProxy[] = []

beforeAll(async () => {
  cluster = await startAuthCluster()
  workDir = mkdtempSync(join(tmpdir(), 'pgfence-tls-'))
  const strangerDir = join(workDir, 'stranger')
  mkdirSync(strangerDir)
  ;[proxyCert, strangerCert] = await Promise.all([
    createSelfSignedCert(workDir),
    createSelfSignedCert(strangerDir),
  ])
})

afterAll(async () => {
  await Promise.all(proxies.map((proxy) => proxy.close()))
  await cluster?.stop()
  rmSync(workDir, { recursive: true, force: true })
})

async function proxyTo(overrides: ConfigOverrides): Promise<TestProxy> {
  const proxy = await startTestProxy(overrides, cluster.superuserUrl)
  proxies.push(proxy)
  return proxy
}

interface SessionFacts {
  user: string
  upstreamTls: boolean
  clientTls: boolean
  /** The session was relayed by the native relay once logged in. */
  native: boolean
}

/** Under `relay: node` (PGFENCE_TEST_RELAY) every session stays in JavaScript. */
const nativeExpected = relayUnderTest() !== 'node'

/** Logs in as the SCRAM user through the proxy and reports which legs of the path are encrypted. */
async function scramSession(proxy: TestProxy, ssl: pg.ClientConfig['ssl']): Promise<SessionFacts> {
  const { user, password } = authUsers.scram
  const client = new pg.Client({
    connectionString: proxy.url(user, 'postgres', password),
    ssl,
    connectionTimeoutMillis: 5000,
    query_timeout: 5000,
  })
  await client.connect()
  try {
    const { rows } = await client.query(
      'SELECT current_user AS user, ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
    )
    const stream = (client as unknown as { connection: { stream: Partial<TLSSocket> } }).connection
      .stream
    return {
      user: rows[0].user,
      upstreamTls: rows[0].ssl,
      clientTls: stream.encrypted === true,
      native: proxy.nativeSessionCount() === 1,
    }
  } finally {
    await client.end()
  }
}

function psqlThrough(
  proxy: TestProxy,
  role: { user: string; password: string },
  connectionOptions: string,
  ...commands: string[]
) {
  const url = `${proxy.url(role.user, 'postgres')}?${connectionOptions}`
  const commandArgs = commands.flatMap((command) => ['-c', command])
  return runCommand(pgBin('psql'), ['-X', '-At', '-d', url, ...commandArgs], {
    env: { PGPASSWORD: role.password },
    timeoutMs: 5000,
  })
}

describe('TLS to the upstream', () => {
  test('tls: require encrypts the upstream connection', async () => {
    const proxy = await proxyTo({ upstream: { tls: 'require' } })
    expect(await scramSession(proxy, false)).toEqual({
      user: authUsers.scram.user,
      upstreamTls: true,
      clientTls: false,
      native: nativeExpected,
    })
  })

  test('a session pool lends its TLS connection to one client after another, relayed alike', async () => {
    const { user, password } = authUsers.scram
    const proxy = await proxyTo({
      upstream: { tls: 'require' },
      pool: { mode: 'session', size: 1 },
      auth: { file: writeUserlist([`"${user}" "${password}"`]) },
    })
    const first = await scramSession(proxy, false)
    const second = await scramSession(proxy, false)
    const expected = { user, upstreamTls: true, clientTls: false, native: nativeExpected }
    expect([first, second]).toEqual([expected, expected])
  })

  test('tls: verify-full with the server CA encrypts and verifies the upstream connection', async () => {
    const proxy = await proxyTo({ upstream: { tls: 'verify-full', ca: cluster.certFile } })
    expect(await scramSession(proxy, false)).toMatchObject({
      upstreamTls: true,
      native: nativeExpected,
    })
  })

  test('tls: verify-full with a CA that did not sign the server certificate refuses to connect', async () => {
    const proxy = await proxyTo({ upstream: { tls: 'verify-full', ca: strangerCert.certFile } })
    await expect(scramSession(proxy, false)).rejects.toMatchObject({ code: '08006' })
  })
})

describe('TLS from clients', () => {
  const clientTls = (): ConfigOverrides => ({
    tls: { cert: proxyCert.certFile, key: proxyCert.keyFile },
    upstream: { tls: 'verify-full', ca: cluster.certFile },
  })

  test('node-postgres with ssl logs in with SCRAM over TLS on both legs', async () => {
    const proxy = await proxyTo(clientTls())
    expect(await scramSession(proxy, { rejectUnauthorized: false })).toEqual({
      user: authUsers.scram.user,
      upstreamTls: true,
      clientTls: true,
      native: nativeExpected,
    })
  })

  test('node-postgres verifies the proxy certificate against its CA', async () => {
    const proxy = await proxyTo(clientTls())
    const ca = readFileSync(proxyCert.certFile, 'utf8')
    const facts = await scramSession(proxy, { ca, servername: 'localhost' })
    expect(facts).toMatchObject({ clientTls: true, native: nativeExpected })
  })

  test('psql with sslmode=verify-full checks the proxy certificate', async () => {
    const proxy = await proxyTo(clientTls())
    const verified = `sslmode=verify-full&sslrootcert=${proxyCert.certFile}`
    const result = await psqlThrough(
      proxy,
      authUsers.trust,
      verified,
      '\\conninfo',
      'SELECT current_user',
    )
    expect(result.stderr).toBe('')
    expect(result.stdout).toContain('SSL connection (protocol: TLS')
    expect(result.stdout).toMatch(new RegExp(`\\n${authUsers.trust.user}\\n$`))
    const stranger = `sslmode=verify-full&sslrootcert=${strangerCert.certFile}`
    const refused = await psqlThrough(proxy, authUsers.trust, stranger, 'SELECT 1')
    expect(refused.code).toBe(2)
    expect(refused.stderr).toContain('certificate verify failed')
  })

  // Channel binding binds to the certificate the client sees. With a certificate of its own the
  // proxy withholds SCRAM-SHA-256-PLUS; libpq, seeing TLS without PLUS, then sends the GS2 flag
  // 'y', which a TLS-capable server must refuse as a possible downgrade: SCRAM's own protection.
  test('with its own certificate, psql logs in with channel_binding=disable and required binding fails', async () => {
    const proxy = await proxyTo(clientTls())
    const scram = authUsers.scram
    const plain = await psqlThrough(
      proxy,
      scram,
      'sslmode=require&channel_binding=disable',
      'SELECT current_user',
    )
    expect(plain).toEqual({ code: 0, stdout: `${scram.user}\n`, stderr: '' })
    const required = await psqlThrough(
      proxy,
      scram,
      'sslmode=require&channel_binding=require',
      'SELECT 1',
    )
    expect(required.code).toBe(2)
    expect(required.stderr).toMatch(/channel binding/)
    const preferred = await psqlThrough(proxy, scram, 'sslmode=require', 'SELECT 1')
    expect(preferred.stderr).toMatch(/channel binding/)
  })

  test('presenting the server certificate keeps SCRAM channel binding end to end', async () => {
    const proxy = await proxyTo({
      tls: { cert: cluster.certFile, key: cluster.keyFile },
      upstream: { tls: 'verify-full', ca: cluster.certFile },
    })
    const scram = authUsers.scram
    for (const binding of ['prefer', 'require']) {
      const result = await psqlThrough(
        proxy,
        scram,
        `sslmode=require&channel_binding=${binding}`,
        'SELECT current_user',
      )
      expect(result).toEqual({ code: 0, stdout: `${scram.user}\n`, stderr: '' })
    }
  })

  test('a client without TLS still logs in when the proxy offers TLS', async () => {
    const proxy = await proxyTo(clientTls())
    const result = await psqlThrough(
      proxy,
      authUsers.scram,
      'sslmode=disable',
      'SELECT current_user',
    )
    expect(result).toMatchObject({ code: 0, stdout: `${authUsers.scram.user}\n` })
  })
})
