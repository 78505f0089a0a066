import type { FencingConfig } from '../config/schema.js'
import type { Logger } from '../log.js'
import { FencingRewriter } from '../rewrite/rewriter.js'
import {
  candidateRow,
  candidatesSql,
  configuredNames,
  resolveNames,
  type ConfiguredName,
  type ResolvedTable,
} from '../schema/resolve-tables.js'
import { installedTriggersSql, ruleChanges } from '../schema/fence-trigger-status.js'
import { holdPresenceSql } from '../schema/proxy-presence.js'
import {
  installedVersion,
  installedVersionSql,
  schemaMismatch,
  type SchemaMismatch,
} from '../schema/schema-version.js'
import { unfencedDescendant, unfencedDescendantsSql } from '../schema/unfenced-descendants.js'
import type { UnresolvedName } from '../rewrite/tables.js'
import { decodeQueryResult, splitResults, type QueryResult } from '../wire/query-result.js'
import {
  guaranteeLine,
  REPLICATION_QUERY,
  replicationMode,
  type ReplicationMode,
} from '../upstream/replication-guarantee.js'
import type { LoginQuery } from '../server/login-query.js'
import type { NativeQueryCache } from '../relay/native-relay.js'

/** How often a database's names are resolved again (a session's login pays one round trip). */
const RECHECK_MS = 60_000

interface DatabaseNames {
  /** When the last check started: a check whose session died is simply retried later. */
  checkedAt: number
  /** The problems logged for this database, so that each is logged once. */
  reported: Set<string>
  /** Refused names and triggered tables as one key, to keep the rewriter while they stay. */
  key: string
  /** Null: the proxy's own rewriter, which checks every fenced table in the statement. */
  fencing: DatabaseFencing | null
  /** The replication mode last logged for the database. */
  replication?: ReplicationMode
}

/** The rewrite of one database's sessions, with the native relay's templates made from it. */
export interface DatabaseFencing {
  rewriter: FencingRewriter
  queryCache: NativeQueryCache | null
}

/** Makes the native relay's Query templates for a rewriter, when sessions are relayed natively. */
export type QueryCacheFactory = (rewriter: FencingRewriter) => NativeQueryCache | null

/**
 * The configured table names, resolved in each database that sessions use, off the statement
 * path: the first session of a database (and one a minute after that) runs the catalog query
 * at login. A name that does not resolve is logged at error once, and the database's sessions
 * get a rewriter that refuses writes to tables spelled like it in another letter case. So is a
 * partition or inheritance child of a fenced table that lacks its fence triggers (created after
 * `pgfence migrate` where its event trigger could not be installed).
 *
 * The same check finds the fenced tables whose row trigger is installed as the config wants
 * it: the database's rewriter leaves their rows to the trigger. Until a database is checked (at
 * start, after a reload), and for a table without its trigger, pgfence checks the rows in the
 * statement itself, so that a table the config fences is never written unchecked through it.
 *
 * It also reads the database's pgfence schema version (schema-version.ts): with none, or another
 * than this pgfence's, every write to a configured table is refused. And its session takes the
 * lock that tells `pgfence uninstall` a proxy fences the database (proxy-presence.ts).
 */
export class TableNameChecks {
  private readonly names: ConfiguredName[]
  /** The queries of the check, in order; null where the config needs none. */
  private readonly queries: (string | null)[]
  private readonly sql: string
  private readonly databases = new Map<string, DatabaseNames>()

  constructor(
    private readonly fencing: FencingConfig,
    private readonly logger: Logger,
    private readonly queryCacheFor: QueryCacheFactory = () => null,
    private readonly recheckMs = RECHECK_MS,
  ) {
    this.names = configuredNames(fencing)
    this.queries = [
      candidatesSql(this.names),
      unfencedDescendantsSql(fencing),
      installedTriggersSql(fencing),
      installedVersionSql,
      holdPresenceSql,
      REPLICATION_QUERY,
    ]
    this.sql = this.queries.filter(Boolean).join(';\n')
  }

  /** The rewrite of a checked database; null before its check (or when it found nothing). */
  fencingFor(database: string): DatabaseFencing | null {
    return this.databases.get(database)?.fencing ?? null
  }

  /** The rewrites of the checked databases. */
  *checkedFencings(): Iterable<DatabaseFencing> {
    for (const { fencing } of this.databases.values()) if (fencing) yield fencing
  }

  /**
   * How long until loginQuery gives a check for this database: 0 when one is due now, Infinity
   * when none ever is. Changes nothing.
   */
  dueInMs(database: string): number {
    if (this.names.length === 0) return Infinity
    const checkedAt = this.databases.get(database)?.checkedAt ?? -Infinity
    return Math.max(0, checkedAt + this.recheckMs - Date.now())
  }

  /** The check for a session logging in to this database to run, when one is due. */
  loginQuery(database: string): LoginQuery | null {
    if (this.names.length === 0) return null
    let state = this.databases.get(database)
    if (state === undefined) {
      state = { checkedAt: -Infinity, reported: new Set(), key: '', fencing: null }
      this.databases.set(database, state)
    }
    const now = Date.now()
    if (now - state.checkedAt < this.recheckMs) return null
    state.checkedAt = now
    const checked = state
    return { sql: this.sql, done: (messages) => this.record(database, checked, messages) }
  }

  private record(database: string, state: DatabaseNames, messages: Buffer[]): void {
    const none: QueryResult = { rows: [] }
    const results = splitResults(messages).map(decodeQueryResult)
    const [names, descendants, installed, version, presence, replication] = this.queries.map(
      (sql) => (sql === null ? none : (results.shift() ?? none)),
    ) as [QueryResult, QueryResult, QueryResult, QueryResult, QueryResult, QueryResult]
    const error =
      names.error ?? descendants.error ?? installed.error ?? version.error ?? presence.error
    if (error) {
      this.logger.warn({ database, err: error.message }, 'could not check fenced table names')
      return
    }
    this.logReplication(database, state, replication)
    const schema = installedVersion(version.rows[0])
    const mismatch = schemaMismatch(schema)
    if (mismatch) return this.refuseEveryName(database, state, mismatch, schema === null)
    const { tables, problems } = resolveNames(this.names, names.rows.map(candidateRow))
    const unfenced = descendants.rows.map((row) => unfencedDescendant(row, this.names))
    const columnless = tables.filter((t) => t.column !== undefined && t.existingColumn === null)
    const triggers = new Map(installed.rows.map((row) => [Number(row.ord), row]))
    const reported = new Set([...problems, ...columnless].map((name) => name.text))
    const withTrigger = new Set<number>()
    const triggerReports: { table: string; message: string }[] = []
    this.fencing.tables.forEach((table, ord) => {
      const changes = ruleChanges(triggers.get(ord), ord, this.fencing)
      if (changes?.length === 0) withTrigger.add(ord)
      else if (!reported.has(table.name))
        triggerReports.push({ table: table.name, message: triggerMessage(table.name, changes) })
    })
    const refusedTables = [...unfenced, ...columnless.map(columnlessTable)]
    const reports = [
      ...problems.map((problem) => ({ table: problem.text, message: problem.message })),
      ...refusedTables.map((table) => ({ table: table.text, message: describe(table) })),
      ...triggerReports,
    ]
    this.report(database, state, reports)
    const refused: UnresolvedName[] = [...problems.filter((p) => p.unresolved), ...refusedTables]
    const key = [...refused.map((name) => name.text), '', ...withTrigger].join('\0')
    if (key === state.key) return
    state.key = key
    const rewriter = new FencingRewriter(this.fencing, 4096, refused, withTrigger)
    state.fencing = { rewriter, queryCache: this.queryCacheFor(rewriter) }
  }

  /**
   * No pgfence schema (never migrated, or uninstalled since: its triggers are gone too), or one
   * of another version, whose functions may not do what this pgfence's rewrite expects of them:
   * every write to a configured table is refused with the mismatch's words, logged in one line.
   */
  private refuseEveryName(
    database: string,
    state: DatabaseNames,
    mismatch: SchemaMismatch,
    missing: boolean,
  ): void {
    const { message, detail, hint } = mismatch
    const line = missing ? NOT_MIGRATED : `${message}: ${detail}; ${hint}`
    this.report(database, state, [{ message: line }])
    const key = `schema\0${message}`
    if (key === state.key) return
    state.key = key
    const refused = this.names.map((name) => ({ ...name, reason: mismatch }))
    const rewriter = new FencingRewriter(this.fencing, 4096, refused, 'none')
    state.fencing = { rewriter, queryCache: this.queryCacheFor(rewriter) }
  }

  /** States the database's replication guarantee: once, and again when it changes. */
  private logReplication(database: string, state: DatabaseNames, result: QueryResult): void {
    const row = result.rows[0]
    if (!row) return
    const mode = replicationMode({
      names: row.names ?? '',
      commit: row.commit ?? '',
      standbys: Number(row.standbys),
    })
    if (mode === state.replication) return
    state.replication = mode
    this.logger.info({ database, replication: mode }, guaranteeLine(mode))
  }

  /** Logs each report at error, once while it stays. */
  private report(
    database: string,
    state: DatabaseNames,
    reports: { table?: string; message: string }[],
  ): void {
    for (const { table, message } of reports) {
      if (!state.reported.has(message)) this.logger.error({ database, table }, message)
    }
    state.reported = new Set(reports.map((report) => report.message))
  }
}

const NOT_MIGRATED =
  'pgfence migrate has not run in this database (it has no pgfence schema): writes to its fenced tables fail; run pgfence migrate'

/** A configured table without its fence column (not migrated): writes to it are refused. */
const columnlessTable = (table: ResolvedTable): UnresolvedName => ({
  text: table.text,
  schema: table.resolvedSchema,
  name: table.name,
  reason: {
    message: `fenced table ${JSON.stringify(table.text)} has no fence column ${table.column}`,
    detail: `it is fenced in the config but pgfence migrate has not run since; writes to it through pgfence are refused`,
    hint: 'run pgfence migrate',
  },
})

/**
 * A fenced table whose trigger is not as the config wants it. With none, pgfence alone fences
 * it; with one installed by an earlier migrate, that one still checks every write (those
 * through pgfence too) by the rule it was installed with.
 */
function triggerMessage(table: string, changes: string[] | null): string {
  const name = JSON.stringify(table)
  if (changes === null)
    return `fenced table ${name} has no enabled fence trigger in this database: pgfence checks the writes that name it, but writes by other paths (functions, views, triggers, partitions, direct connections) are not fenced; run pgfence migrate`
  return `fencing rule for ${name} changed (${changes.join(', ')}): run \`pgfence migrate\` to apply it to the database's triggers; until then the installed triggers keep the old rule`
}

/** A refused descendant's log line: the refusal's words. */
const describe = ({ reason }: UnresolvedName): string =>
  `${reason!.message}: ${reason!.detail}; ${reason!.hint}`
