import { refusalLiterals } from './refusal-literals.js'
import { sqlFile } from './sql-file.js'
import { EPOCH_TAG, SEQUENCE_SPAN } from './token-layout.js'

/**
 * The server's timeline as an SQL expression: the first 8 hex digits of its current WAL file's
 * name (no privilege needed). pgfence.timeline() returns it; the row trigger reads it inline.
 */
export const currentTimelineSql = `('x' || pg_catalog.substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::bigint`

/**
 * The fencing-token source: one sequence for every resource, so tokens strictly increase across
 * all grants. A token is EPOCH_TAG + timeline × 2^40 + the sequence's value: a promotion starts
 * a new timeline, so the tokens issued after it exceed every earlier one even when the new
 * primary lost sequence increments (asynchronous standbys), and no token is issued twice. A write
 * with a token of an earlier timeline is refused (PF409, pgfence.epoch_check): the failover may
 * have lost the writes of newer tokens, which would let an older holder's write through. Tokens
 * of other issuers carry no timeline; from 2^62 + 2^40 up they would be read as if they did.
 * Each token is durable before the caller sees it: sql/token-source.sql says how.
 */
export const tokenSourceSql = sqlFile('token-source', {
  ...refusalLiterals,
  epoch_tag: EPOCH_TAG,
  sequence_span: SEQUENCE_SPAN,
  current_timeline: currentTimelineSql,
})

/** The highest `--token-start`: the token after it must still fit a bigint. */
export const maxTokenStart = 2n ** 63n - 2n

/**
 * `pgfence migrate --token-start N`: the next token next_token() issues is above N (tokens already
 * in use, from before pgfence), never lower than it would have been. Tokens carry the timeline
 * above the sequence's bits, so only an N at or above this timeline's first token moves the
 * sequence (to N's sequence part); a lower N is below every token already. ALTER SEQUENCE blocks
 * every nextval until COMMIT and makes setval part of the transaction, so no token is issued
 * between the read and the move. The first SELECT gives `last` (the highest token issued
 * before), `moved`, and `beyond` (N past this timeline's tokens: nothing moved); the second
 * `next`, the token next_token() issues next.
 */
export const tokenStartSql = (start: bigint): string => `BEGIN;
SET LOCAL synchronous_commit = on;
ALTER SEQUENCE pgfence.token_seq NO CYCLE;
WITH before AS MATERIALIZED (
  SELECT pgfence.last_issued_token() AS last,
         ${start} - (${EPOCH_TAG} + pgfence.timeline() * ${SEQUENCE_SPAN}) AS seq
)
SELECT last, seq >= ${SEQUENCE_SPAN} AS beyond,
       CASE WHEN last < ${start} AND seq > 0 AND seq < ${SEQUENCE_SPAN}
            THEN pg_catalog.setval('pgfence.token_seq', seq) END IS NOT NULL AS moved
  FROM before;
SELECT ${EPOCH_TAG} + pgfence.timeline() * ${SEQUENCE_SPAN}
       + coalesce(pg_catalog.pg_sequence_last_value('pgfence.token_seq'::regclass), 0) + 1 AS next;
COMMIT;
`
