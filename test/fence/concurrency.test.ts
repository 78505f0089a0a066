import pg from 'pg'
import { afterAll, beforeAll, expect, test } from 'vitest'
import { createTestDatabase, maintenanceSession, type TestDatabase } from '../support/database.js'
import { fencedClient, fencingConfig, installFencing, type FencedClient } from './support.js'

const fencing = fencingConfig({
  tables: [{ name: 'counters', column: 'fencing_token', requireToken: true }],
})
let db: TestDatabase
let admin: pg.Client

beforeAll(async () => {
  db = await createTestDatabase('fence_concurrency')
  admin = new pg.Client({ connectionString: db.url, ...maintenanceSession })
  await admin.connect()
  await admin.query(`
    CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL);
    CREATE TABLE audit (seq bigserial PRIMARY KEY, old_token bigint, new_token bigint, n int);
  `)
  await installFencing(db.url, fencing)
  await admin.query(`
    INSERT INTO counters (id, n) VALUES (1, 0);
    CREATE FUNCTION audit_counter() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO audit (old_token, new_token, n) VALUES (OLD.fencing_token, NEW.fencing_token, NEW.n);
      RETURN NEW;
    END $$;
    CREATE TRIGGER audit_counter AFTER UPDATE ON counters FOR EACH ROW EXECUTE FUNCTION audit_counter();
  `)
})

afterAll(async () => {
  await admin?.end()
  await db?.drop()
})

const jitter = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, Math.random() * 4))

const writes = [
  'UPDATE counters SET n = n + 1 WHERE id = 1',
  'INSERT INTO counters (id, n) VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = counters.n + 1',
]

/** What all writers have seen so far: they stop once there is enough of both outcomes. */
interface Progress {
  accepted: number
  stale: number
}

const enough = (p: Progress): boolean => p.accepted >= 60 && p.stale >= 5
/** A bound on each writer's attempts, so a fence that never refuses fails instead of hanging. */
const MAX_ATTEMPTS = 500

/** One writer: takes increasing tokens, pauses at random (a stale holder), then writes. */
async function writer(app: FencedClient, nextToken: () => bigint, progress: Progress) {
  let accepted = 0
  const refusals: string[] = []
  for (let i = 0; i < MAX_ATTEMPTS && !enough(progress); i++) {
    const token = nextToken()
    await jitter()
    const write = writes[i % writes.length]!
    const style = Math.floor(Math.random() * 3)
    try {
      if (style === 0) {
        await app.query(`SET app.fencing_token = ${token}`)
        await app.query(write)
      } else if (style === 1) {
        await app.query(`${write} /*fencing_token='${token}'*/`)
      } else {
        await app.query('BEGIN ISOLATION LEVEL REPEATABLE READ')
        await app.query(`SET LOCAL app.fencing_token = ${token}`)
        await app.query(write)
        await jitter()
        await app.query('COMMIT')
      }
      accepted++
      progress.accepted++
    } catch (err) {
      const code = (err as { code?: string }).code ?? String(err)
      refusals.push(code)
      if (code === 'PF409') progress.stale++
      await app.query('ROLLBACK')
    }
  }
  return { accepted, refusals }
}

test('concurrent writers: the committed token never decreases, every accepted write counts', async () => {
  let token = 1000n
  const nextToken = (): bigint => ++token
  const apps = await Promise.all(Array.from({ length: 12 }, () => fencedClient(db.url, fencing)))
  const progress: Progress = { accepted: 0, stale: 0 }
  const results = await Promise.all(apps.map((app) => writer(app, nextToken, progress)))
  await Promise.all(apps.map((app) => app.end()))

  const accepted = results.reduce((sum, r) => sum + r.accepted, 0)
  const refusals = results.flatMap((r) => r.refusals)
  expect(accepted).toBeGreaterThanOrEqual(60)
  expect(refusals.length).toBeGreaterThan(0)
  expect(new Set(refusals)).toEqual(
    new Set(refusals.filter((code) => code === 'PF409' || code === '40001')),
  )
  expect(refusals).toContain('PF409')

  const counter = (await admin.query('SELECT n, fencing_token FROM counters WHERE id = 1')).rows[0]
  expect(counter.n).toBe(accepted)
  const audit = (await admin.query('SELECT old_token, new_token, n FROM audit ORDER BY seq')).rows
  expect(audit).toHaveLength(accepted)
  let previous = 0n
  for (const row of audit) {
    expect(BigInt(row.new_token) >= BigInt(row.old_token)).toBe(true)
    expect(BigInt(row.new_token) >= previous).toBe(true)
    previous = BigInt(row.new_token)
  }
  expect(BigInt(counter.fencing_token)).toBe(previous)
})
