import { parseArgs } from 'node:util'
import pg from 'pg'
import { fencingOf } from './fencing-config.js'
import { maintenanceRole } from '../schema/fence-triggers.js'
import { proxySessionsSql } from '../schema/proxy-presence.js'
import { uninstallSql } from '../schema/uninstall.js'

export const usage = `usage: pgfence uninstall --config FILE --database-url URL [--drop-fence-columns] [--dry-run]

Removes what pgfence migrate installed: the fence triggers, resource gates, event trigger,
helpers and the pgfence schema (fences, token sequence, leases). Fence columns only with
--drop-fence-columns. Idempotent; refused while a pgfence proxy fences the database.
--dry-run prints the SQL.`

const say = (line: string) => void process.stdout.write(`pgfence uninstall: ${line}\n`)

/** The sessions that show a proxy fences the database (proxy-presence.ts), as one line. */
async function proxySessions(client: pg.Client): Promise<string | null> {
  const { rows } = await client.query(proxySessionsSql)
  if (rows.length === 0) return null
  const sessions = rows.map(
    (row) => `pid ${row.pid}${row.application_name ? ` (${row.application_name})` : ''}`,
  )
  return sessions.join(', ')
}

/** `pgfence uninstall`: removes the pgfence schema, triggers and (when asked) fence columns. */
export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: {
      config: { type: 'string' },
      'database-url': { type: 'string' },
      'drop-fence-columns': { type: 'boolean', default: false },
      'dry-run': { type: 'boolean', default: false },
    },
  })
  if (!values.config || (!values['dry-run'] && !values['database-url'])) {
    process.stderr.write(`${usage}\n`)
    return 2
  }
  const fencing = fencingOf(values.config)
  if (fencing === null) return 2
  const sql = uninstallSql(fencing, values['drop-fence-columns'])
  if (values['dry-run']) {
    process.stdout.write(sql)
    return 0
  }
  const client = new pg.Client({ connectionString: values['database-url'] })
  try {
    await client.connect()
    const sessions = await proxySessions(client)
    if (sessions !== null) {
      process.stderr.write(
        `pgfence uninstall: a pgfence proxy fences this database (its sessions: ${sessions}): stop it or point it elsewhere first; nothing was changed\n`,
      )
      return 1
    }
    await client.query(sql)
  } catch (err) {
    process.stderr.write(`pgfence uninstall failed: ${(err as Error).message}\n`)
    return 1
  } finally {
    await client.end().catch(() => undefined)
  }
  say(
    values['drop-fence-columns']
      ? 'pgfence schema, triggers and fence columns removed'
      : 'pgfence schema and triggers removed; fence columns kept (--drop-fence-columns drops them)',
  )
  say(`the role ${maintenanceRole} is left: it is shared by the cluster's databases`)
  return 0
}
