/**
 * Words of refusals that both the proxy and PostgreSQL give: the installed SQL
 * (src/schema/sql) has them filled in from here, so the two never drift apart. A function's
 * arguments are SQL text when the SQL builds the words with format() (`%s`).
 */

export const staleTokenMessage = 'stale fencing token'

/** PF409's DETAIL; `what`: `table …` or `resource '…'`. The proxy reads both tokens back. */
export const staleTokenDetail = (incoming: string, committed: string, what: string): string =>
  `incoming token ${incoming} is lower than the committed token ${committed} of ${what}`

export const staleTokenHint =
  'another holder has written since this token was issued: re-acquire the lock and retry'
export const staleFenceHint =
  'another holder has raised the fence since this token was issued: re-acquire the lock and retry'

/** PF501 for a statement that writes a fence column itself. */
export const fenceColumnWrite = {
  message: 'the fence column of a fenced table cannot be written directly',
  detail: (column: string, relation: string): string =>
    `column ${column} of table ${relation} is maintained by pgfence`,
  hint: 'remove the fence column from the statement; pgfence sets it to the presented token',
}

/** PF501 for a TRUNCATE of a fenced table. */
export const truncateRefusal = {
  message: 'TRUNCATE is not supported on a fenced table',
  detail: (relation: string): string =>
    `table ${relation} is fenced; TRUNCATE removes rows without checking their tokens`,
  hint: 'use DELETE, which pgfence fences',
}
