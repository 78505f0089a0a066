import { parseArgs } from 'node:util'
import pg from 'pg'
import { loadConfigFile } from '../config/load.js'
import { installSql } from '../schema/install.js'

const usage = 'usage: pgfence migrate --config FILE --database-url URL [--dry-run]'

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
  let sql: string
  try {
    sql = installSql(loadConfigFile(values.config).fencing)
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`)
    return 2
  }
  if (values['dry-run']) {
    process.stdout.write(sql)
    return 0
  }
  const client = new pg.Client({ connectionString: values['database-url'] })
  try {
    await client.connect()
    await client.query(sql)
  } catch (err) {
    process.stderr.write(`pgfence migrate failed: ${(err as Error).message}\n`)
    return 1
  } finally {
    await client.end().catch(() => undefined)
  }
  process.stdout.write('pgfence migrate: database is ready\n')
  return 0
}
