/**
 * The fencing-token source: one sequence for every resource, so tokens strictly increase across
 * all grants. Each token is durable before the caller sees it, even on a server that runs with
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

CREATE OR REPLACE FUNCTION pgfence.next_token() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
  PERFORM set_config('synchronous_commit', 'on', true);
  PERFORM pg_current_xact_id();
  RETURN nextval('pgfence.token_seq');
END
$$;

-- The highest token next_token() has issued (0 before the first), readable without privileges
-- on the sequence.
CREATE OR REPLACE FUNCTION pgfence.last_issued_token() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
  SELECT coalesce(pg_sequence_last_value('pgfence.token_seq'::regclass), 0)
$$;
`

/** The highest `--token-start`: the token after it must still fit a bigint. */
export const maxTokenStart = 2n ** 63n - 2n

/**
 * `pgfence migrate --token-start N`: the next token next_token() issues is above N (tokens already
 * in use, from before pgfence), never lower than it would have been. ALTER SEQUENCE blocks every
 * nextval until COMMIT and makes setval part of the transaction, so no token is issued between
 * the read and the move. The SELECT gives `last` (the highest token issued before) and `moved`
 * (true when the sequence was moved).
 */
export const tokenStartSql = (start: bigint): string => `BEGIN;
SET LOCAL synchronous_commit = on;
ALTER SEQUENCE pgfence.token_seq NO CYCLE;
WITH before AS MATERIALIZED (SELECT pgfence.last_issued_token() AS last)
SELECT last, last < ${start} AS moved,
       CASE WHEN last < ${start} THEN pg_catalog.setval('pgfence.token_seq', ${start}) END
  FROM before;
COMMIT;
`
