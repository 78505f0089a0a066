import pg from 'pg'
import postgres from 'postgres'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { authUsers, startAuthCluster, type AuthCluster } from '../support/auth-cluster.js'
import { currentUserAt } from '../support/clients.js'
import { startTestProxy, type TestProxy } from '../support/proxy.js'
import { pgBin, runCommand } from './support/commands.js'

let cluster: AuthCluster
let proxy: TestProxy

beforeAll(async () => {
  cluster = await startAuthCluster()
  proxy = await startTestProxy({}, cluster.superuserUrl)
})

afterAll(async () => {
  await proxy?.close()
  await cluster?.stop()
})

const currentUserWithPg = (user: string, password: string) =>
  currentUserAt(proxy.url(user, 'postgres', password))

describe('password authentication through the proxy', () => {
  test.each(Object.entries(authUsers))('%s: node-postgres logs in', async (_method, role) => {
    expect(await currentUserWithPg(role.user, role.password)).toBe(role.user)
  })

  test.each(Object.entries(authUsers))('%s: postgres.js logs in', async (_method, role) => {
    const sql = postgres(proxy.url(role.user, 'postgres', role.password), { max: 1 })
    try {
      const [row] = await sql`SELECT current_user AS name`
      expect(row.name).toBe(role.user)
    } finally {
      await sql.end()
    }
  })

  test.each(Object.entries(authUsers))('%s: psql logs in', async (_method, role) => {
    const result = await runCommand(
      pgBin('psql'),
      ['-X', '-At', '-d', proxy.url(role.user, 'postgres'), '-c', 'SELECT current_user'],
      { env: { PGPASSWORD: role.password } },
    )
    expect(result).toMatchObject({ code: 0, stdout: `${role.user}\n` })
  })

  test.each([authUsers.scram, authUsers.md5])(
    'a wrong password for $user fails with 28P01',
    async (role) => {
      await expect(currentUserWithPg(role.user, 'wrong-password')).rejects.toMatchObject({
        code: '28P01',
        message: `password authentication failed for user "${role.user}"`,
      })
    },
  )

  test('100 concurrent sessions each run their own queries', async () => {
    const sessions = Array.from({ length: 100 }, async (_, index) => {
      const role = Object.values(authUsers)[index % 3]
      const client = new pg.Client({
        connectionString: proxy.url(role.user, 'postgres', role.password),
      })
      await client.connect()
      try {
        const answers: number[] = []
        for (let round = 0; round < 5; round++) {
          const { rows } = await client.query('SELECT $1::int * 1000 + $2::int AS answer', [
            index,
            round,
          ])
          answers.push(rows[0].answer)
        }
        const { rows } = await client.query('SELECT current_user AS name')
        return { index, answers, user: rows[0].name }
      } finally {
        await client.end()
      }
    })
    const results = await Promise.all(sessions)
    for (const { index, answers, user } of results) {
      expect(answers).toEqual([0, 1, 2, 3, 4].map((round) => index * 1000 + round))
      expect(user).toBe(Object.values(authUsers)[index % 3].user)
    }
  })
})
