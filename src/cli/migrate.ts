import { parseArgs } from 'node:util'
import pg from 'pg'
import { loadConfigFile } from '../config/load.js'
import type { FencingConfig } from '../config/schema.js'
import { installSql } from '../schema/install.js'
import { resolveTables } from '../schema/resolve-tables.js'
import {
  guaranteeLine,
  REPLICATION_QUERY,
  replicationMode,
} from '../upstream/replication-guarantee.js'

const usage = 'usage: pgfence migrate --config FILE --database-url URL [--dry-run]'

/** A WARNING the install raised (what it could not do, and what to do about it), on stderr. */
function reportWarning(notice: {
  severity?: string
  message?: string
  detail?: string
  hint?: string
}): void {
  if (notice.severity !== 'WARNING') return
  const lines = [notice.message, notice.detail, notice.hint && `hint: ${notice.hint}`]
  const text = lines.filter(Boolean).join('\n  ')
  process.stderr.write(`pgfence migrate: warning: ${text.replace(/^pgfence: /, '')}\n`)
}

/** `pgfence migrate`: installs the pgfence schema and fence columns, idempotently. */
export async function run(argv: string[]): Promise<number> {
  let values: { config?: string; 'database-url'?: string; 'dry-run'?: boolean }
  try {
    ;({ values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string' },
        'database-url': { type: 'string' },
        'dry-run': { type: 'boolean', default: false },
      },
    }))
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${usage}\n`)
    return 2
  }
  if (!values.config || (!values['dry-run'] && !values['database-url'])) {
    process.stderr.write(`${usage}\n`)
    return 2
  }
  let fencing: FencingConfig
  try {
    fencing = loadConfigFile(values.config).fencing
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`)
    return 2
  }
  if (values['dry-run'] && !values['database-url']) {
    process.stdout.write(installSql(fencing))
    return 0
  }
  const client = new pg.Client({ connectionString: values['database-url'] })
  client.on('notice', reportWarning)
  try {
    await client.connect()
    const { tables, problems } = await resolveTables(client, fencing)
    if (problems.length > 0) {
      for (const problem of problems) process.stderr.write(`pgfence migrate: ${problem.message}\n`)
      process.stderr.write('pgfence migrate: nothing was changed\n')
      return 1
    }
    const sql = installSql(fencing, tables)
    if (values['dry-run']) {
      process.stdout.write(sql)
      return 0
    }
    await client.query(sql)
    const { rows } = await client.query(REPLICATION_QUERY)
    process.stdout.write(`pgfence migrate: ${guaranteeLine(replicationMode(rows[0]))}\n`)
  } catch (err) {
    process.stderr.write(`pgfence migrate failed: ${(err as Error).message}\n`)
    return 1
  } finally {
    await client.end().catch(() => undefined)
  }
  process.stdout.write('pgfence migrate: database is ready\n')
  return 0
}
