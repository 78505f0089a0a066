import { loadModule, parseSync } from 'libpg-query'
import { deparseSync } from 'pgsql-deparser'
import type { FencingConfig } from '../config/schema.js'
import { truncateGate } from './fence-resource.js'
import type { FenceContext } from './fence-context.js'
import { fenceStatement } from './fence-statement.js'
import { highestParam, tokenize } from './lexer.js'
import { Lru } from './lru.js'
import {
  exactMarks,
  marksOf,
  normalise,
  withoutMarkers,
  type CommentKeys,
  type CommentMark,
} from './normalise.js'
import { createPrefilter } from './prefilter.js'
import { Refusal, refusalSql } from './refusal.js'
import { spliceAssignments } from './token-assignment.js'
import {
  canWrite,
  maintenanceNeedle,
  mixedTokensRefusal,
  preparedTokenRefusal,
  sharedToken,
  statementMarker,
  writesLater,
} from './statement-marker.js'
import type { StatementRewriter } from './statement-rewriter.js'
import {
  fencedTables,
  resourceTables,
  type FencedTable,
  type ResourceTable,
  type Triggered,
  type UnresolvedName,
} from './tables.js'
import { escapeRegex } from './sql-text.js'
import type { FencedWrite } from './token-refusals.js'
import { fillTemplate, toTemplate, type Template } from './template.js'

/** What pgfence sends upstream for a text, and the refusals it contains. */
export interface Rewrite {
  /** null: the original text is forwarded unchanged. */
  upstream: string | null
  refusals: Refusal[]
  /** The rewrite holds comment values inside a string (a DO body): never a template. */
  exactOnly?: boolean
  /** Nothing but the statement marker of this comment mark was added to the text. */
  markOnly?: CommentMark
  /** The fenced writes the statements run (not those PREPARE or a rule only define). */
  writes?: FencedWrite[]
  /** The comment token every writing statement carries: the one the fence reads. */
  commentToken?: CommentMark
}

type CacheEntry =
  | { kind: 'unchanged' }
  | { kind: 'text'; text: string }
  | { kind: 'template'; template: Template }
  /** The literal-free form does not parse (typed literals...): rewrite the exact text. */
  | { kind: 'exact' }
  /** The exact text with the statement marker of the comment token at this mark. */
  | { kind: 'marked'; mark: CommentMark }

const unchanged: CacheEntry = { kind: 'unchanged' }
/** Texts sessions under maintenance rewrite are few: backfills, repairs, fixtures. */
const maintenanceCacheSize = 256
const commentOpener = /\/\*|--/
const mayNameMaintenance = new RegExp(`${escapeRegex(maintenanceNeedle)}|set_config`, 'i')

export class FencingRewriter implements StatementRewriter {
  /** Parser runs so far: the cache is doing its job when this stays flat. */
  parses = 0
  private readonly tables: FencedTable[]
  private readonly resources: ResourceTable[]
  readonly commentKeys: CommentKeys
  private readonly mayTouchFencedTable: (sql: string) => boolean
  /** Also true for a text that may carry a comment token: it gets the statement marker. */
  private readonly mayNeedRewrite: (sql: string) => boolean
  readonly prefilterNeedles: readonly string[]
  private readonly cache: Lru<CacheEntry>
  private maintenanceRewriter: FencingRewriter | undefined

  /**
   * `unresolved`: configured names that resolve to no table where this rewriter is used;
   * `triggered`: the fenced tables that have their fence trigger there; `maintenance`: for
   * sessions that may be under pgfence.maintenance (see underMaintenance).
   */
  constructor(
    private readonly fencing: FencingConfig,
    cacheSize = 4096,
    private readonly unresolved: UnresolvedName[] = [],
    private readonly triggered: Triggered = 'all',
    private readonly maintenance = false,
  ) {
    this.tables = fencedTables(fencing, triggered)
    this.resources = resourceTables(fencing)
    this.commentKeys = { token: fencing.commentKey, resource: fencing.resourceCommentKey }
    // Unresolved names and unfenced descendants too: writes to them are refused.
    const named = [...this.tables, ...this.resources, ...unresolved]
    this.mayTouchFencedTable = createPrefilter(named).test
    // The native relay's needles are plain words: its texts with the key but no comment are
    // parsed once per shape and cached as unchanged.
    const prefilter = createPrefilter([...named, { name: fencing.commentKey }])
    const key = new RegExp(escapeRegex(fencing.commentKey), 'i')
    this.mayNeedRewrite = (sql) =>
      this.mayTouchFencedTable(sql) || (key.test(sql) && commentOpener.test(sql))
    this.prefilterNeedles = [...prefilter.needles, maintenanceNeedle]
    this.cache = new Lru(cacheSize)
  }

  /**
   * The rewriter of a session that may be under pgfence.maintenance, with a cache of its own:
   * writes to the fence column of a table with its fence trigger pass to the trigger.
   */
  get underMaintenance(): FencingRewriter {
    if (this.maintenance) return this
    this.maintenanceRewriter ??= new FencingRewriter(
      this.fencing,
      maintenanceCacheSize,
      this.unresolved,
      this.triggered,
      true,
    )
    return this.maintenanceRewriter
  }

  get cacheSize(): number {
    return this.cache.size
  }

  cacheLookups(): { hits: number; misses: number } {
    return { hits: this.cache.hits, misses: this.cache.misses }
  }

  rewriteQuery(sql: string): string | null {
    if (!this.mayNeedRewrite(sql)) return null
    const tokens = tokenize(sql)
    const normalised = normalise(sql, tokens, this.commentKeys)
    const key = `q\0${normalised.text}`
    let entry = this.cache.get(key)
    if (entry === undefined) {
      entry = this.templateFor(normalised.text, normalised.base, normalised.marks)
      this.cache.set(key, entry)
    }
    if (entry.kind === 'template') return fillTemplate(entry.template, normalised.values)
    if (entry.kind === 'exact') return this.cachedExact(`x\0${sql}`, sql, false)
    if (entry.kind === 'marked') {
      // The original text, comments and all: only the token's value is read from the template.
      const value = normalised.values[Number(entry.mark.token!.slice(1)) - normalised.base]
      return statementMarker({ ...entry.mark, token: value }) + sql
    }
    return entry.kind === 'text' ? entry.text : null
  }

  templateForQuery(text: string): Template | null | undefined {
    // Never cached in the native relay: the proxy logs each of these. The key has lost
    // set_config's setting name with the other literals, so every set_config call goes by.
    if (mayNameMaintenance.test(text)) return null
    const entry = this.templateFor(text, 1, marksOf(text))
    if (entry.kind === 'template') return entry.template
    // A fenced write that only gets the marker: the text as normalised (other comments dropped,
    // as a rewrite drops them). Other marked texts keep every byte, through rewriteQuery.
    if (entry.kind === 'marked' && this.mayTouchFencedTable(text)) {
      return toTemplate(statementMarker(entry.mark) + withoutMarkers(text), 1)
    }
    return entry.kind === 'unchanged' ? undefined : null
  }

  rewriteParse(sql: string): string | null {
    if (!this.mayNeedRewrite(sql)) return null
    return this.cachedExact(`p\0${sql}`, sql, true)
  }

  /** The rewrite of one text, uncached, with the refusals it holds (for `pgfence explain`). */
  explain(sql: string): Rewrite {
    if (!this.mayNeedRewrite(sql)) return { upstream: null, refusals: [] }
    const tokens = tokenize(sql)
    return this.rewriteExact(sql, exactMarks(sql, tokens, this.commentKeys), 0)
  }

  private templateFor(text: string, base: number, marks: CommentMark[]): CacheEntry {
    let rewrite: Rewrite
    try {
      rewrite = this.rewriteStatements(text, marks, 0)
    } catch {
      return { kind: 'exact' }
    }
    if (rewrite.exactOnly) return { kind: 'exact' }
    if (rewrite.markOnly) return { kind: 'marked', mark: rewrite.markOnly }
    return rewrite.upstream === null
      ? unchanged
      : { kind: 'template', template: toTemplate(rewrite.upstream, base) }
  }

  /** `isParse`: a refusal must then accept the statement's parameters. */
  private cachedExact(key: string, sql: string, isParse: boolean): string | null {
    let entry = this.cache.get(key)
    if (entry === undefined) {
      const tokens = tokenize(sql)
      const marks = exactMarks(sql, tokens, this.commentKeys)
      const parameterCount = isParse ? highestParam(tokens, sql) : 0
      const { upstream } = this.rewriteExact(sql, marks, parameterCount)
      entry = upstream === null ? unchanged : { kind: 'text', text: upstream }
      this.cache.set(key, entry)
    }
    return entry.kind === 'text' ? entry.text : null
  }

  /** A text that mentions a fenced table but does not parse is refused, never passed through. */
  private rewriteExact(sql: string, marks: CommentMark[], parameterCount: number): Rewrite {
    try {
      return this.rewriteStatements(sql, marks, parameterCount)
    } catch (err) {
      // PostgreSQL reports the syntax error of a text that names no fenced table itself.
      if (!this.mayTouchFencedTable(sql)) return { upstream: null, refusals: [] }
      const refusal = new Refusal(
        'PF501',
        'statement on a fenced table could not be parsed',
        (err as Error).message,
        'pgfence forwards only writes it can fence; check the statement syntax',
      )
      return { upstream: refusalSql(refusal, parameterCount), refusals: [refusal] }
    }
  }

  /** Rewrites each statement of the text on its own and splices the results in. */
  private rewriteStatements(text: string, marks: CommentMark[], parameterCount: number): Rewrite {
    this.parses++
    const tree = parseSync(text) as {
      stmts: { stmt: unknown; stmt_location?: number; stmt_len?: number }[]
    }
    const offsets = charOffsets(text)
    const refusals: Refusal[] = []
    let upstream = ''
    let copied = 0
    let changed = false
    let exactOnly = false
    const writerTokens: (CommentMark | undefined)[] = []
    const writes: FencedWrite[] = []
    tree.stmts.forEach((entry, index) => {
      const start = offsets(entry.stmt_location ?? 0)
      const end = entry.stmt_len
        ? offsets((entry.stmt_location ?? 0) + entry.stmt_len)
        : text.length
      const last = index === tree.stmts.length - 1
      const inStatement = marks.filter((m) => m.position >= start && (m.position < end || last))
      const tokenMark = inStatement.find((m) => m.token)
      if (canWrite(entry.stmt as object)) writerTokens.push(tokenMark)
      const ctx: FenceContext = {
        tables: this.tables,
        resources: this.resources,
        unresolved: this.unresolved,
        setting: this.fencing.setting,
        resourceSetting: this.fencing.resourceSetting,
        rejectUnissued: this.fencing.rejectUnissuedTokens,
        commentToken: tokenMark?.token ?? 'NULL',
        commentTokenValid: tokenMark?.tokenValid === true,
        maintenance: this.maintenance,
        assignments: [],
        writes: [],
        commentResource: inStatement.find((m) => m.resource)?.resource ?? 'NULL',
      }
      let replacement: string
      try {
        const fenced = fenceStatement(entry.stmt, ctx)
        // After the walk, which finds the table the refusal names.
        if (tokenMark && 'PrepareStmt' in (entry.stmt as object))
          throw preparedTokenRefusal(ctx.setting, ctx.writes[0])
        const truncate = fenced ? null : truncateGate(entry.stmt, ctx)
        if (!writesLater(entry.stmt as object)) writes.push(...ctx.writes)
        if (!fenced && truncate === null && ctx.assignments.length === 0) return
        if (truncate !== null) exactOnly = true
        replacement =
          truncate ??
          (fenced
            ? deparseSync(entry.stmt as Parameters<typeof deparseSync>[0], { pretty: false })
            : // A normalised text's comment markers and leading blanks go, as a deparse drops them.
              withoutMarkers(
                spliceAssignments(text, start, end, ctx.assignments, offsets),
              ).trimStart())
      } catch (err) {
        if (!(err instanceof Refusal)) throw err
        refusals.push(err)
        replacement = refusalSql(err, parameterCount)
      }
      upstream += `${text.slice(copied, start)}${start > 0 ? ' ' : ''}${replacement}`
      copied = end
      changed = true
    })
    const rewritten = changed ? upstream + text.slice(copied) : null
    return this.withStatementMarker(text, rewritten, writerTokens, parameterCount, {
      refusals,
      exactOnly,
      writes,
    })
  }

  /** Puts the statement marker of the writers' shared comment token before the text. */
  private withStatementMarker(
    text: string,
    rewritten: string | null,
    writerTokens: (CommentMark | undefined)[],
    parameterCount: number,
    rest: Omit<Rewrite, 'upstream'>,
  ): Rewrite {
    const shared = sharedToken(writerTokens)
    if (shared === undefined) return { upstream: rewritten, ...rest }
    if (shared !== 'mixed') {
      const markOnly = rewritten === null ? shared : undefined
      const upstream = statementMarker(shared) + (rewritten ?? text)
      return { upstream, ...rest, markOnly, commentToken: shared }
    }
    // Placeholders of a template cannot be compared: only exact texts can tell.
    if (writerTokens.some((m) => m?.token?.startsWith('$'))) {
      return { upstream: null, refusals: [], exactOnly: true }
    }
    // Named after the first fenced write, as a rejection of it would be (metrics count by table).
    const refusal = mixedTokensRefusal(rest.writes?.[0])
    return { upstream: refusalSql(refusal, parameterCount), refusals: [refusal] }
  }
}

/** Maps the parser's UTF-8 byte offsets to string indexes. */
function charOffsets(text: string): (byteOffset: number) => number {
  // eslint-disable-next-line no-control-regex
  if (/^[\x00-\x7f]*$/.test(text)) return (offset) => offset
  const bytes = Buffer.from(text, 'utf8')
  return (offset) => bytes.subarray(0, offset).toString('utf8').length
}

/** `triggered`: which fenced tables are known to have their fence trigger where it is used. */
export async function createRewriter(
  fencing: FencingConfig,
  triggered: Triggered = 'all',
): Promise<FencingRewriter> {
  await loadModule()
  return new FencingRewriter(fencing, 4096, [], triggered)
}
