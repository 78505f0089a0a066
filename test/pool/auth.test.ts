import pg from 'pg'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import {
  authUsers,
  startAuthCluster,
  writeClusterUserlist,
  type AuthCluster,
} from '../support/auth-cluster.js'
import { currentUserAt } from '../support/clients.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { pgBin, runCommand } from '../e2e/support/commands.js'

let cluster: AuthCluster
let fromFile: TestProxy
let fromQuery: TestProxy

beforeAll(async () => {
  cluster = await startAuthCluster()
  // trust_user in plaintext: PostgreSQL stores no password for it.
  const file = await writeClusterUserlist(cluster, [`"${authUsers.trust.user}" "trust-secret"`])
  fromFile = await startTestProxy(
    { pool: { mode: 'session', size: 2 }, auth: { file } },
    cluster.superuserUrl,
  )
  fromQuery = await startTestProxy(
    {
      pool: { mode: 'session', size: 2 },
      auth: {
        query: 'SELECT usename, passwd FROM pg_shadow WHERE usename = $1',
        user: 'postgres',
      },
    },
    cluster.superuserUrl,
  )
})

afterAll(async () => {
  await fromFile?.close()
  await fromQuery?.close()
  await cluster?.stop()
})

const passwordOf = (role: { user: string; password: string }) =>
  role.user === authUsers.trust.user ? 'trust-secret' : role.password

const currentUser = (proxy: TestProxy, user: string, password: string) =>
  currentUserAt(proxy.url(user, 'postgres', password))

describe('client authentication by pgfence (auth.file)', () => {
  test.each(Object.values(authUsers))(
    '$user: node-postgres logs in, twice (new and reused server connection)',
    async (role) => {
      expect(await currentUser(fromFile, role.user, passwordOf(role))).toBe(role.user)
      expect(await currentUser(fromFile, role.user, passwordOf(role))).toBe(role.user)
    },
  )

  test('SCRAM keys from the client proof log new server connections in', async () => {
    const role = authUsers.scram
    const clients = await Promise.all(
      [0, 1].map(async () => {
        const client = new pg.Client({
          connectionString: fromFile.url(role.user, 'postgres', role.password),
        })
        await client.connect()
        return client
      }),
    )
    const pids = await Promise.all(
      clients.map(async (c) => (await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid),
    )
    await Promise.all(clients.map((c) => c.end()))
    expect(new Set(pids).size).toBe(2)
  })

  test.each(Object.values(authUsers))('$user: postgres.js and psql log in', async (role) => {
    const sql = postgres(fromFile.url(role.user, 'postgres', passwordOf(role)), { max: 1 })
    try {
      expect((await sql`SELECT current_user AS name`)[0].name).toBe(role.user)
    } finally {
      await sql.end()
    }
    const psql = await runCommand(
      pgBin('psql'),
      ['-X', '-At', '-d', fromFile.url(role.user, 'postgres'), '-c', 'SELECT current_user'],
      { env: { PGPASSWORD: passwordOf(role) } },
    )
    expect(psql).toMatchObject({ code: 0, stdout: `${role.user}\n` })
  })

  test.each([authUsers.scram, authUsers.md5, { user: 'nobody', password: 'x' }])(
    '$user: a wrong password is refused by pgfence with 28P01',
    async (role) => {
      await expect(currentUser(fromFile, role.user, 'wrong-password')).rejects.toMatchObject({
        code: '28P01',
        message: `password authentication failed for user "${role.user}"`,
      })
    },
  )
})

describe('client authentication by pgfence (auth.query)', () => {
  test.each([authUsers.scram, authUsers.md5])('$user logs in', async (role) => {
    expect(await currentUser(fromQuery, role.user, role.password)).toBe(role.user)
  })

  test('a wrong password is 28P01', async () => {
    await expect(
      currentUser(fromQuery, authUsers.scram.user, 'wrong-password'),
    ).rejects.toMatchObject({ code: '28P01' })
  })
})
