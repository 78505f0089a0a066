// Pays invoice 99 under a lease. Needs only PostgreSQL: a database migrated by `pgfence migrate`
// with `invoices` fenced, where the lease is a row of pgfence.leases and its token comes from
// pgfence.next_token(). Tokens carry the server's timeline above 2^62, so they are above the
// row's token 100 (set by hand before pgfence) without `--token-start`.
//   DATABASE_URL=postgres://…:6432/app         the application's connection, through pgfence
//   DIRECT_DATABASE_URL=postgres://…:5432/app  PostgreSQL directly: the lease store
import pg from 'pg'
import { LeaseManager } from 'pgfence/lease'

const client = new pg.Client({ connectionString: process.env.DATABASE_URL })
await client.connect()

const leases = new LeaseManager({
  store: { postgres: process.env.DIRECT_DATABASE_URL }, // PostgreSQL directly (not through pgfence), or a pg.Pool
  ttlMs: 10_000, // lease TTL (default 10 s)
  driftPpm: 1000, // ε, assumed clock-rate difference (default 1000 ppm)
  handleSignals: true, // default: SIGTERM/SIGINT release every lease, then exit 0
})

try {
  // LeaseUnavailableError after waitMs: another owner held the lease, or the store did not
  // answer (then err.cause says why).
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
