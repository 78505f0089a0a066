import { parseSync } from 'libpg-query'
import { usualTokenAdmitted } from '../schema/fence-helpers.js'
import { quoteLiteral } from './sql-text.js'

// Parse-tree nodes are plain JSON from the PostgreSQL parser.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Node = any

/** A parse tree for one SQL expression: templates are grafted rather than hand-built. */
export function expr(sql: string): Node {
  return parseSync(`SELECT ${sql}`).stmts[0].stmt.SelectStmt.targetList[0].ResTarget.val
}

export const and = (...args: Node[]): Node => {
  const present = args.filter((arg) => arg !== undefined)
  return present.length === 1 ? present[0] : { BoolExpr: { boolop: 'AND_EXPR', args: present } }
}

/** What the token expressions of one statement are made of. */
export interface TokenSource {
  /** Name of the session setting that holds the token. */
  setting: string
  /** SQL text of the statement's comment token: NULL, a string literal or a `$n` placeholder. */
  commentToken: string
  /** The comment token is a valid one (digits, at most 2^63-1). */
  commentTokenValid: boolean
  /** Refuse tokens above the highest one the token sequence has issued. */
  rejectUnissued: boolean
  /**
   * The statement is planned once and run many times (a named prepared statement): the usual
   * session-token check is then inline built-ins, cheaper per row than a PL/pgSQL call. A
   * statement planned at every run pays more for planning those than for the call.
   */
  planOnce: boolean
}

/**
 * SQL text of the token the statement presents, read when it executes. `names` are the
 * trailing `rel, col` arguments that name the write in errors.
 */
export function tokenCall(source: TokenSource, required: boolean, names: string): string {
  const helper = source.rejectUnissued ? 'issued_token' : 'token'
  return `pgfence.${helper}(${source.commentToken}, ${quoteLiteral(source.setting)}, ${required}, ${names})`
}

/**
 * SQL text of the compare-and-raise of one row's fence column `column`: `advance_token` gives
 * the new fence value, `admits` the boolean form for a row about to be deleted.
 */
export function fenceCall(
  helper: 'advance_token' | 'admits',
  column: string,
  source: TokenSource,
  required: boolean,
  names: string,
): string {
  if (source.commentTokenValid && !source.rejectUnissued) {
    return constantTokenFence(helper, column, source.commentToken, names)
  }
  const setting = quoteLiteral(source.setting)
  const call = `pgfence.${helper}(${column}, ${source.commentToken}, ${setting}, ${required}, ${names}, ${source.rejectUnissued})`
  if (!source.planOnce || source.commentToken !== 'NULL' || source.rejectUnissued) return call
  const token = `pg_catalog.current_setting(${setting}, true)`
  const admitted = helper === 'advance_token' ? `${token}::bigint` : 'true'
  return `CASE WHEN ${usualTokenAdmitted(token, column)} THEN ${admitted} ELSE ${call} END`
}

/**
 * A valid comment token is a constant of the statement: the compare is plain SQL, and only a
 * row holding a higher token calls `stale`, which raises PF409. A NULL fence admits any token.
 * In the simple protocol every statement is planned anew, and this costs PostgreSQL less than
 * a PL/pgSQL call per row.
 */
function constantTokenFence(
  helper: 'advance_token' | 'admits',
  column: string,
  token: string,
  names: string,
): string {
  const stale = `pgfence.stale(${column}, ${token}, ${names})`
  return helper === 'advance_token'
    ? `CASE WHEN ${column} > ${token} THEN ${stale} ELSE ${token} END`
    : `CASE WHEN ${column} > ${token} THEN ${stale} IS NOT NULL ELSE true END`
}
