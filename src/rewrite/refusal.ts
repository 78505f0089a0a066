import { quoteLiteral } from './sql-text.js'

/** The SQLSTATEs of pgfence's fences, which the proxy counts as rejections. */
export const FENCING_CODES = ['PF409', 'PF428', 'PF400', 'PF501'] as const

/** A write pgfence will not forward; it becomes a statement that raises `code` upstream. */
export class Refusal extends Error {
  override name = 'Refusal'
  constructor(
    readonly code: Exclude<(typeof FENCING_CODES)[number], 'PF409'>,
    message: string,
    readonly detail: string,
    readonly hint: string,
    readonly relation: string | null = null,
    readonly column: string | null = null,
  ) {
    super(message)
  }
}

/**
 * The statement sent instead of a refused one. A Parse with parameters must still accept them,
 * or Bind would fail before the refusal is raised.
 */
export function refusalSql(refusal: Refusal, parameterCount: number): string {
  const literal = (value: string | null): string => (value === null ? 'NULL' : quoteLiteral(value))
  const call = `SELECT pgfence.refuse(${[
    refusal.code,
    refusal.message,
    refusal.detail,
    refusal.hint,
    refusal.relation,
    refusal.column,
  ]
    .map(literal)
    .join(', ')})`
  if (parameterCount === 0) return call
  const params = Array.from({ length: parameterCount }, (_, i) => `$${i + 1}`).join(', ')
  return `${call} FROM (SELECT ${params}) AS p`
}
