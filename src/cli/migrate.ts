import { parseArgs } from 'node:util'
import pg from 'pg'
import { fencingOf } from './fencing-config.js'
import type { FencingConfig } from '../config/schema.js'
import { columnFixes, columnProblems, describeFix } from '../schema/fence-columns.js'
import { installSql } from '../schema/install.js'
import { resolveTables } from '../schema/resolve-tables.js'
import { schemaDifferences } from '../schema/schema-check.js'
import { installedVersion, installedVersionSql, SCHEMA_VERSION } from '../schema/schema-version.js'
import { maxTokenStart, tokenStartSql } from '../schema/token-source.js'
import {
  guaranteeLine,
  REPLICATION_QUERY,
  replicationMode,
} from '../upstream/replication-guarantee.js'

export const usage = `usage: pgfence migrate --config FILE --database-url URL [--token-start N] [--dry-run]
       pgfence migrate --check --config FILE --database-url URL

Installs the pgfence schema (version ${SCHEMA_VERSION}) and the fence columns and triggers, or
upgrades an earlier version in place, keeping fences and tokens. --dry-run prints the SQL;
--check changes nothing, says what differs and exits 1 if anything does.`

/** `--token-start`: an integer in [0, maxTokenStart]; undefined when absent, null when invalid. */
function tokenStart(text: string | undefined): bigint | undefined | null {
  if (text === undefined) return undefined
  return /^[0-9]{1,19}$/.test(text) && BigInt(text) <= maxTokenStart ? BigInt(text) : null
}

const say = (line: string) => void process.stdout.write(`pgfence migrate: ${line}\n`)

/** Runs tokenStartSql; says what it did. */
async function startTokens(client: pg.Client, start: bigint): Promise<string> {
  const selects = [await client.query(tokenStartSql(start))]
    .flat()
    .filter((result) => result.command === 'SELECT')
  const { last, moved, beyond } = selects[0]!.rows[0]!
  const { next } = selects[1]!.rows[0]!
  if (beyond === true)
    throw new Error(`--token-start ${start} is above the tokens of this timeline (next: ${next})`)
  const before = last === '0' ? 'none was issued before' : `the last issued was ${last}`
  return moved === true
    ? `token sequence moved: the next token is ${next} (${before})`
    : `token sequence left as it is: the next token, ${next}, is above ${start} already`
}

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

const installedLine = (before: number | null): string =>
  before === null
    ? `pgfence schema version ${SCHEMA_VERSION} installed`
    : `pgfence schema upgraded from version ${before} to ${SCHEMA_VERSION}, fences and tokens kept`

/** `--check`: one line per difference and exit 1, or one OK line and exit 0. */
async function check(url: string, fencing: FencingConfig): Promise<number> {
  const client = new pg.Client({ connectionString: url })
  try {
    await client.connect()
    const differences = await schemaDifferences(client, fencing)
    const tell = (line: string) => void process.stdout.write(`pgfence migrate --check: ${line}\n`)
    if (differences.length === 0) {
      tell(
        `OK: pgfence schema version ${SCHEMA_VERSION}, fence columns and triggers as the config wants them`,
      )
      return 0
    }
    for (const difference of differences) tell(difference)
    tell(
      `${differences.length} difference${differences.length === 1 ? '' : 's'}: run pgfence migrate`,
    )
    return 1
  } catch (err) {
    process.stderr.write(`pgfence migrate --check failed: ${(err as Error).message}\n`)
    return 2
  } finally {
    await client.end().catch(() => undefined)
  }
}

/** `pgfence migrate`: installs the pgfence schema and fence columns, idempotently. */
export async function run(argv: string[]): Promise<number> {
  let values: {
    config?: string
    'database-url'?: string
    'dry-run'?: boolean
    'token-start'?: string
    check?: boolean
  }
  try {
    ;({ values } = parseArgs({
      args: argv,
      options: {
        config: { type: 'string' },
        'database-url': { type: 'string' },
        'dry-run': { type: 'boolean', default: false },
        'token-start': { type: 'string' },
        check: { type: 'boolean', default: false },
      },
    }))
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${usage}\n`)
    return 2
  }
  const start = tokenStart(values['token-start'])
  if (start === null) {
    process.stderr.write(`--token-start must be an integer in [0, ${maxTokenStart}]\n${usage}\n`)
    return 2
  }
  const needsDatabase = values.check || !values['dry-run']
  const conflicting = values.check && (values['dry-run'] || start !== undefined)
  if (!values.config || (needsDatabase && !values['database-url']) || conflicting) {
    process.stderr.write(`${usage}\n`)
    return 2
  }
  const startSql = start === undefined ? '' : tokenStartSql(start)
  const fencing = fencingOf(values.config)
  if (fencing === null) return 2
  if (values['dry-run'] && !values['database-url']) {
    process.stdout.write(installSql(fencing) + startSql)
    return 0
  }
  if (values.check) return check(values['database-url']!, fencing)
  const client = new pg.Client({ connectionString: values['database-url'] })
  client.on('notice', reportWarning)
  try {
    await client.connect()
    const before = installedVersion((await client.query(installedVersionSql)).rows[0])
    const { tables, problems: nameProblems } = await resolveTables(client, fencing)
    const problems = [
      ...nameProblems.map((problem) => problem.message),
      ...(await columnProblems(client, tables)),
    ]
    if (problems.length > 0) {
      for (const problem of problems) process.stderr.write(`pgfence migrate: ${problem}\n`)
      process.stderr.write('pgfence migrate: nothing was changed\n')
      return 1
    }
    const sql = installSql(fencing, tables)
    if (values['dry-run']) {
      process.stdout.write(sql + startSql)
      return 0
    }
    await client.query(sql)
    if (before !== SCHEMA_VERSION) say(installedLine(before))
    for (const fix of columnFixes(tables)) say(describeFix(fix))
    if (start !== undefined) say(await startTokens(client, start))
    const { rows } = await client.query(REPLICATION_QUERY)
    say(guaranteeLine(replicationMode(rows[0])))
  } catch (err) {
    process.stderr.write(`pgfence migrate failed: ${(err as Error).message}\n`)
    return 1
  } finally {
    await client.end().catch(() => undefined)
  }
  say('database is ready')
  return 0
}
