// Pays invoice 99 under a lease. Needs Redis, and a database migrated by `pgfence migrate` with
// `invoices` fenced. Invoice 99 is at token 100 (as in the demo database), so this assumes the
// migrate ran with `--token-start 100`: leases then draw tokens above it.
//   DATABASE_URL=postgres://…:6432/app         the application's connection, through pgfence
//   DIRECT_DATABASE_URL=postgres://…:5432/app  the token source: PostgreSQL directly
import pg from 'pg'
import { LeaseManager } from 'pgfence/lease'

const client = new pg.Client({ connectionString: process.env.DATABASE_URL })
await client.connect()

const leases = new LeaseManager({
  redis: process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', // or an ioredis instance
  tokenSource: process.env.DIRECT_DATABASE_URL, // PostgreSQL directly (not through pgfence), or a pg.Pool
  ttlMs: 10_000, // lease TTL (default 10 s)
  driftPpm: 1000, // ε, assumed clock-rate difference (default 1000 ppm)
  keyPrefix: 'pgfence:lease:', // default; the Redis key is keyPrefix + resource
  handleSignals: true, // default: SIGTERM/SIGINT release every lease, then exit 0
})

try {
  // LeaseUnavailableError after waitMs: another owner held the lease, or Redis or the token
  // source did not answer (then err.cause says why).
  const token = await leases.withLease(
    'invoice:99',
    async (lease) => {
      await client.query('BEGIN')
      try {
        await lease.applyToTransaction(client) // app.fencing_token = <lease.token> until COMMIT/ROLLBACK
        lease.signal.throwIfAborted() // check before each write
        await client.query("UPDATE invoices SET status = 'PAID' WHERE id = 99")
        await client.query('COMMIT')
      } catch (err) {
        await client.query('ROLLBACK')
        throw err
      }
      return lease.token // bigint, strictly greater than every token issued before
    },
    { waitMs: 5000 },
  )
  console.log(`invoice 99 paid with token ${token}`)
} finally {
  await leases.close() // releases every lease, closes the manager's own connections
  await client.end()
}
