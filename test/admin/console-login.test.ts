import pg from 'pg'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import {
  authUsers,
  startAuthCluster,
  writeClusterUserlist,
  type AuthCluster,
} from '../support/auth-cluster.js'
import { startTestProxy, type ConfigOverrides, type TestProxy } from '../support/proxy.js'
import { sqlstateOf } from '../support/sqlstate.js'
import { pgBin, runCommand } from '../e2e/support/commands.js'
import { closedPort } from '../e2e/support/ports.js'

/**
 * The cluster trusts postgres from pgfence's host, as the test PostgreSQL does: only pgfence can
 * tell this password from a wrong one. md5_user and scram_user log in with their passwords.
 */
const ADMIN_PASSWORD = 'console-secret'
const admin = { users: ['postgres', authUsers.md5.user] }
const poolModes = ['session', 'transaction'] as const

let cluster: AuthCluster
let userlist: string

beforeAll(async () => {
  cluster = await startAuthCluster()
  const client = new pg.Client({ connectionString: cluster.superuserUrl })
  await client.connect()
  await client.query(`ALTER ROLE postgres PASSWORD '${ADMIN_PASSWORD}'`)
  await client.end()
  userlist = await writeClusterUserlist(cluster)
})

afterAll(async () => cluster?.stop())

/** A proxy in front of the cluster (or `upstreamUrl`) with postgres and md5_user as admins. */
const startConsoleProxy = (overrides: ConfigOverrides, upstreamUrl = cluster.superuserUrl) =>
  startTestProxy({ admin, ...overrides }, upstreamUrl)

/** The console's SHOW POOLS column names, as node-postgres reads them. */
async function showPoolsColumns(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url })
  client.on('error', () => {})
  await client.connect()
  try {
    return (await client.query('SHOW POOLS')).fields.map((field) => field.name)
  } finally {
    await client.end()
  }
}

const consoleLogin = (proxy: TestProxy, user: string, password: string) =>
  sqlstateOf(showPoolsColumns(proxy.url(user, 'pgfence', password)))

const psql = (proxy: TestProxy, user: string, password: string, command: string) =>
  runCommand(
    pgBin('psql'),
    ['-X', '-At', '-d', proxy.url(user, 'pgfence', password), '-c', command],
    {
      timeoutMs: 10_000,
    },
  )

describe('pool.mode none: PostgreSQL checks the console login', () => {
  let proxy: TestProxy
  beforeAll(async () => (proxy = await startConsoleProxy({ pool: { mode: 'none' } })))
  afterAll(async () => proxy?.close())

  test('a wrong password is refused by PostgreSQL with 28P01', async () => {
    expect(await consoleLogin(proxy, authUsers.md5.user, 'wrong-password')).toBe('28P01')
  })

  test('a role PostgreSQL does not let in is refused with 28000', async () => {
    expect(await consoleLogin(proxy, 'no_such_role', 'x')).toBe('28000')
  })

  test('the right password opens the console and SHOW POOLS answers', async () => {
    expect(
      await showPoolsColumns(proxy.url(authUsers.md5.user, 'pgfence', authUsers.md5.password)),
    ).toContain('pool_mode')
  })

  test('PostgreSQL trusts postgres from pgfence host: any password is accepted', async () => {
    expect(await consoleLogin(proxy, 'postgres', 'wrong-password')).toBe('ok')
  })

  test('a user not in admin.users gets 42501', async () => {
    expect(await consoleLogin(proxy, authUsers.scram.user, authUsers.scram.password)).toBe('42501')
  })
})

describe.each(poolModes)('pool.mode %s: pgfence checks the console login (auth.file)', (mode) => {
  let proxy: TestProxy
  beforeAll(
    async () => (proxy = await startConsoleProxy({ pool: { mode }, auth: { file: userlist } })),
  )
  afterAll(async () => proxy?.close())

  test('a wrong password is refused with 28P01 although PostgreSQL trusts the user', async () => {
    await expect(
      showPoolsColumns(proxy.url('postgres', 'pgfence', 'wrong-password')),
    ).rejects.toMatchObject({
      code: '28P01',
      message: 'password authentication failed for user "postgres"',
    })
    const reload = await psql(proxy, 'postgres', 'wrong-password', 'RELOAD')
    expect(reload.code).toBe(2)
    expect(reload.stderr).toContain('password authentication failed for user "postgres"')
    expect(reload.stdout).toBe('')
  })

  test('a user not in the userlist is refused with 28P01', async () => {
    expect(await consoleLogin(proxy, 'no_such_role', 'x')).toBe('28P01')
  })

  test('the right password opens the console (SCRAM and md5 secrets)', async () => {
    const pools = await psql(proxy, 'postgres', ADMIN_PASSWORD, 'SHOW POOLS')
    expect(pools).toMatchObject({ code: 0, stderr: '' })
    expect(
      await showPoolsColumns(proxy.url(authUsers.md5.user, 'pgfence', authUsers.md5.password)),
    ).toContain('pool_mode')
  })

  test('a user not in admin.users gets 42501', async () => {
    expect(await consoleLogin(proxy, authUsers.scram.user, authUsers.scram.password)).toBe('42501')
  })
})

test('with auth.file the console answers while the upstream is unreachable', async () => {
  const refusing = await closedPort()
  const proxy = await startConsoleProxy(
    { pool: { mode: 'session' }, auth: { file: userlist } },
    `postgres://postgres@127.0.0.1:${refusing}/postgres`,
  )
  try {
    const stats = await psql(proxy, 'postgres', ADMIN_PASSWORD, 'SHOW STATS')
    expect(stats).toMatchObject({ code: 0, stderr: '' })
    expect(stats.stdout.trim().split('\n')).toHaveLength(1)
    expect(await consoleLogin(proxy, 'postgres', 'wrong-password')).toBe('28P01')
  } finally {
    await proxy.close()
  }
})

test('with auth.query the console looks its user up in the upstream', async () => {
  const proxy = await startConsoleProxy({
    pool: { mode: 'session' },
    auth: { query: 'SELECT usename, passwd FROM pg_shadow WHERE usename = $1', user: 'postgres' },
  })
  try {
    expect(await consoleLogin(proxy, 'postgres', ADMIN_PASSWORD)).toBe('ok')
    expect(await consoleLogin(proxy, 'postgres', 'wrong-password')).toBe('28P01')
    expect(await consoleLogin(proxy, authUsers.md5.user, authUsers.md5.password)).toBe('ok')
  } finally {
    await proxy.close()
  }
})
