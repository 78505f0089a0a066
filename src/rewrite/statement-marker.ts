import type { CommentMark } from './normalise.js'
import type { Node } from './ast.js'
import { Refusal } from './refusal.js'
import type { FencedWrite } from './token-refusals.js'

/**
 * A statement that carries a comment token is sent with a marker at its very start, where it
 * cannot sit inside a literal: `/*pgfence:token='201'*\/ `. The fence triggers read it from
 * current_query(), so the token also fences writes the statement causes indirectly (functions,
 * views, triggers, rules). An invalid token is marked '-', which the triggers refuse as PF400.
 */
export const statementTokenPrefix = "/*pgfence:token='"

/** `token` is the mark's SQL text: a literal of digits, or a placeholder filled with one. */
export const statementMarker = (mark: CommentMark): string =>
  mark.tokenValid ? `/*pgfence:token=${mark.token}*/ ` : `${statementTokenPrefix}-'*/ `

const placeholderMarker = /^\/\*pgfence:token=\$(\d+)\*\/ /

/** The placeholder a marker at the start of a template text holds: its number and span. */
export function markerPlaceholder(
  text: string,
): { number: number; start: number; end: number } | null {
  const match = placeholderMarker.exec(text)
  if (!match) return null
  const start = statementTokenPrefix.length - 1
  return { number: Number(match[1]), start, end: start + 1 + match[1]!.length }
}

/** Texts that name the maintenance switch: the proxy logs each one it relays. */
export const maintenanceNeedle = 'pgfence.maintenance'

/** Statements that cannot write: they need no token, and may go without one. */
const cannotWrite = new Set(['TransactionStmt', 'VariableSetStmt', 'VariableShowStmt'])

export const canWrite = (stmt: object): boolean => !cannotWrite.has(Object.keys(stmt)[0] ?? '')

/** PREPARE, CREATE RULE and EXPLAIN without ANALYZE name writes that run later, if ever. */
export function writesLater(stmt: Node): boolean {
  if ('PrepareStmt' in stmt || 'RuleStmt' in stmt) return true
  const options: Node[] | undefined = stmt.ExplainStmt?.options
  return 'ExplainStmt' in stmt && !options?.some((o) => o.DefElem?.defname === 'analyze')
}

/**
 * The one comment token the writing statements of a text share: undefined when none carries
 * one, 'mixed' when they differ (one current_query() cannot give two statements two tokens).
 */
export function sharedToken(marks: (CommentMark | undefined)[]): CommentMark | undefined | 'mixed' {
  const first = marks[0]
  const same = marks.every((m) => m?.token === first?.token && m?.tokenValid === first?.tokenValid)
  return same ? first : 'mixed'
}

/** `write`: the first fenced write of the query, which the error names (so do metrics). */
export const mixedTokensRefusal = (write?: FencedWrite): Refusal =>
  new Refusal(
    'PF501',
    'statements with different fencing tokens in one query',
    'a query of several statements carries one fencing token for all of them',
    'send the statements separately, or give each the same token',
    write?.relation,
    write?.column,
  )

/**
 * An SQL-level `PREPARE … AS` runs its write at each `EXECUTE`, whose text the fence triggers
 * read: a comment token in the PREPARE would not reach them.
 */
export const preparedTokenRefusal = (setting: string, write?: FencedWrite): Refusal =>
  new Refusal(
    'PF501',
    'a fencing token comment in PREPARE does not apply to its EXECUTE',
    'the token of a prepared statement is read when it executes, from the EXECUTE statement',
    `put the comment on the EXECUTE, or SET ${setting} before it`,
    write?.relation,
    write?.column,
  )
