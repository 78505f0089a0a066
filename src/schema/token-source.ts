/** Set in every token next_token() issues: the tokens that carry the timeline they were issued on. */
export const EPOCH_TAG = 2n ** 62n
/** The sequence's share of a token: its low 40 bits; the timeline sits above them. */
const SEQUENCE_BITS = 40n
const SEQUENCE_SPAN = 2n ** SEQUENCE_BITS

/** The timeline a token of next_token() was issued on (null: a token from another issuer). */
export const tokenTimeline = (token: bigint): number | null =>
  token >= EPOCH_TAG ? Number((token - EPOCH_TAG) >> SEQUENCE_BITS) : null

/**
 * The fencing-token source: one sequence for every resource, so tokens strictly increase across
 * all grants. A token is EPOCH_TAG + timeline × 2^40 + the sequence's value: a promotion starts
 * a new timeline, so the tokens issued after it exceed every earlier one even when the new
 * primary lost sequence increments (asynchronous standbys), and no token is issued twice. A write
 * with a token of an earlier timeline is refused (PF409, pgfence.epoch_check): the failover may
 * have lost the writes of newer tokens, which would let an older holder's write through. Tokens
 * of other issuers carry no timeline; from 2^62 + 2^40 up they would be read as if they did. Each token is durable before the caller sees it, even on a server that runs with
 * `synchronous_commit = off`:
 *
 * - `set_config('synchronous_commit', 'on', true)` is transaction-local, so it still holds when
 *   the caller's (autocommit) transaction commits. A `SET synchronous_commit = on` clause on the
 *   function would be undone when the function returns, before the commit.
 * - `nextval` writes WAL only once every 32 values and assigns a transaction id only then; a
 *   commit without an xid writes no commit record and flushes nothing. `pg_current_xact_id()`
 *   gives every call an xid, so every commit flushes WAL up to its commit record, which covers
 *   the sequence's last logged value whichever transaction wrote it.
 */
export const tokenSourceSql = `CREATE SCHEMA IF NOT EXISTS pgfence;

CREATE SEQUENCE IF NOT EXISTS pgfence.token_seq AS bigint MINVALUE 1 NO CYCLE;

-- The server's timeline: the first 8 hex digits of its current WAL file's name (no privilege
-- needed). It grows at every promotion. On a standby: 55000, as no write may happen there.
CREATE OR REPLACE FUNCTION pgfence.timeline() RETURNS bigint
LANGUAGE sql STABLE
AS $$
  SELECT ('x' || substr(pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
$$;

CREATE OR REPLACE FUNCTION pgfence.next_token() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
  seq bigint;
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  PERFORM pg_current_xact_id();
  seq := nextval('pgfence.token_seq');
  IF seq >= ${SEQUENCE_SPAN} THEN
    RAISE EXCEPTION USING ERRCODE = '2200H', MESSAGE = 'pgfence.token_seq is above 2^40',
      HINT = 'tokens keep the timeline above the sequence''s 40 bits: ALTER SEQUENCE pgfence.token_seq RESTART';
  END IF;
  RETURN ${EPOCH_TAG} + pgfence.timeline() * ${SEQUENCE_SPAN} + seq;
END
$$;

-- A write with a token next_token() issued before a promotion: that failover may have lost the
-- writes of newer tokens (asynchronous standbys), so the token is invalidated. Timeline 0 and
-- those above this server's are no tokens of next_token() here: other issuers' (up to 2^63-1).
CREATE OR REPLACE FUNCTION pgfence.epoch_check(token bigint, rel text, col text)
RETURNS void LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  issued bigint := (token - ${EPOCH_TAG}) / ${SEQUENCE_SPAN};
  current bigint := pgfence.timeline();
BEGIN
  IF issued BETWEEN 1 AND current - 1 THEN
    PERFORM pgfence.refuse('PF409', 'stale fencing token',
      'fencing token ' || token || ' was issued on timeline ' || issued || ', before the '
        || 'promotion to timeline ' || current || ': a failover invalidated the token (the '
        || 'promoted server may have lost writes of newer tokens)',
      'take a new lease: tokens issued now are above every earlier one', rel, col);
  END IF;
END
$fn$;

-- The highest token next_token() has issued (0 before the first), readable without privileges
-- on the sequence: on this timeline, or above any of an earlier one.
CREATE OR REPLACE FUNCTION pgfence.last_issued_token() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  SELECT coalesce(${EPOCH_TAG} + pgfence.timeline() * ${SEQUENCE_SPAN}
    + pg_sequence_last_value('pgfence.token_seq'::regclass), 0)
$$;
`

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
