import type { FencingConfig } from '../config/schema.js'
import type { Logger } from '../log.js'
import { FencingRewriter } from '../rewrite/rewriter.js'
import {
  candidateRow,
  candidatesSql,
  configuredNames,
  resolveNames,
  type ConfiguredName,
} from '../schema/resolve-tables.js'
import { unfencedDescendant, unfencedDescendantsSql } from '../schema/unfenced-descendants.js'
import type { UnresolvedName } from '../rewrite/tables.js'
import { decodeQueryResult, splitResults, type QueryResult } from '../wire/query-result.js'
import type { LoginQuery } from './login-query.js'

/** How often a database's names are resolved again (a session's login pays one round trip). */
const RECHECK_MS = 60_000

interface DatabaseNames {
  /** When the last check started: a check whose session died is simply retried later. */
  checkedAt: number
  /** The problems logged for this database, so that each is logged once. */
  reported: Set<string>
  /** Refused names as one key, to keep the rewriter (and its cache) while they stay. */
  unresolvedKey: string
  /**
   * Refuses writes to look-alikes of unresolved names and to unfenced descendants of fenced
   * tables; null: the proxy's own rewriter.
   */
  rewriter: FencingRewriter | null
}

/**
 * The configured table names, resolved in each database that sessions use, off the statement
 * path: the first session of a database (and one a minute after that) runs the catalog query
 * at login. A name that does not resolve is logged at error once, and the database's sessions
 * get a rewriter that refuses writes to tables spelled like it in another letter case. So is a
 * partition or inheritance child of a fenced table that lacks its fence triggers (created after
 * `pgfence migrate` where its event trigger could not be installed).
 */
export class TableNameChecks {
  private readonly names: ConfiguredName[]
  private readonly sql: string
  private readonly databases = new Map<string, DatabaseNames>()

  constructor(
    private readonly fencing: FencingConfig,
    private readonly logger: Logger,
    private readonly recheckMs = RECHECK_MS,
  ) {
    this.names = configuredNames(fencing)
    const descendants = unfencedDescendantsSql(fencing)
    this.sql = [candidatesSql(this.names), descendants].filter(Boolean).join(';\n')
  }

  /** The rewriter for a database whose names do not all resolve; null when they do. */
  rewriterFor(database: string): FencingRewriter | null {
    return this.databases.get(database)?.rewriter ?? null
  }

  /** The check for a session logging in to this database to run, when one is due. */
  loginQuery(database: string): LoginQuery | null {
    if (this.names.length === 0) return null
    let state = this.databases.get(database)
    if (state === undefined) {
      state = { checkedAt: -Infinity, reported: new Set(), unresolvedKey: '', rewriter: null }
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
    const [names = none, descendants = none] = splitResults(messages).map(decodeQueryResult)
    const error = names.error ?? descendants.error
    if (error) {
      this.logger.warn({ database, err: error.message }, 'could not check fenced table names')
      return
    }
    const { problems } = resolveNames(this.names, names.rows.map(candidateRow))
    const unfenced = descendants.rows.map((row) => unfencedDescendant(row, this.names))
    const reports = [
      ...problems.map((problem) => ({ table: problem.text, message: problem.message })),
      ...unfenced.map((table) => ({ table: table.text, message: describe(table) })),
    ]
    for (const { table, message } of reports) {
      if (!state.reported.has(message)) this.logger.error({ database, table }, message)
    }
    state.reported = new Set(reports.map((report) => report.message))
    const refused: UnresolvedName[] = [...problems.filter((p) => p.unresolved), ...unfenced]
    const key = refused.map((name) => name.text).join('\0')
    if (key === state.unresolvedKey) return
    state.unresolvedKey = key
    state.rewriter = refused.length === 0 ? null : new FencingRewriter(this.fencing, 4096, refused)
  }
}

/** A refused descendant's log line: the refusal's words. */
const describe = ({ reason }: UnresolvedName): string =>
  `${reason!.message}: ${reason!.detail}; ${reason!.hint}`
