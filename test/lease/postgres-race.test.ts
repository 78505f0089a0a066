import { fork } from 'node:child_process'
import { once } from 'node:events'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { TestDatabase } from '../support/database.js'
import { buildScripts } from './support/build-scripts.js'
import { createTokenDatabase, runSql } from './support/lease-fixtures.js'

let db: TestDatabase
let scripts: Awaited<ReturnType<typeof buildScripts>>

/** Every version of a lease row, in the order PostgreSQL wrote them: grants, renewals, releases. */
const historySql = `CREATE TABLE lease_history (seq bigserial, LIKE pgfence.leases);
CREATE FUNCTION record_lease() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO lease_history (resource, owner, token, granted_at, expires_at)
  VALUES (NEW.resource, NEW.owner, NEW.token, NEW.granted_at, NEW.expires_at);
  RETURN NULL;
END $$;
CREATE TRIGGER record_lease AFTER INSERT OR UPDATE ON pgfence.leases
  FOR EACH ROW EXECUTE FUNCTION record_lease();`

/**
 * One row per grant in the order PostgreSQL granted them: whether it began no earlier than the
 * previous lease ended (its last version's expires_at: a release, or the last renewal's expiry)
 * and whether its token is higher. Compared in PostgreSQL, to the microsecond.
 */
const grantsSql = `WITH grants AS (
  SELECT token, min(granted_at) AS granted_at,
         (array_agg(expires_at ORDER BY seq DESC))[1] AS ended_at
  FROM lease_history GROUP BY token
)
SELECT token::text,
       granted_at >= lag(ended_at) OVER w AS after_previous_end,
       token > lag(token) OVER w AS token_rises
FROM grants WINDOW w AS (ORDER BY granted_at) ORDER BY granted_at`

beforeAll(async () => {
  ;[db, scripts] = await Promise.all([
    createTokenDatabase('lease_postgres_race'),
    buildScripts({ 'race-lease': 'test/lease/fixtures/race-lease.ts' }),
  ])
  await runSql(db.url, historySql)
})

afterAll(async () => {
  scripts.remove()
  await db.drop()
})

async function race(rounds: number): Promise<string[]> {
  const child = fork(scripts.path('race-lease'), {
    env: { ...process.env, DATABASE_URL: db.url, ROUNDS: String(rounds) },
    stdio: 'inherit',
  })
  const exited = once(child, 'exit')
  const [message] = (await once(child, 'message')) as [{ tokens: string[] }]
  expect((await exited)[0]).toBe(0)
  return message.tokens
}

describe('the postgres lease store under a race', () => {
  it('never grants one resource to two holders at once, and tokens rise with each grant', async () => {
    const granted = (await Promise.all([race(500), race(500)])).flat()
    expect(granted).toHaveLength(1000)

    const { rows } = await runSql(db.url, grantsSql)
    // Each lease handed out is one grant in the table, and nothing else was granted.
    expect(rows.map((row) => row.token).sort()).toEqual([...granted].sort())
    const overlapping = rows.slice(1).filter((row) => !row.after_previous_end)
    const falling = rows.slice(1).filter((row) => !row.token_rises)
    expect({ overlapping, falling }).toEqual({ overlapping: [], falling: [] })
  })
})
