-- The fencing-token source: one sequence for every resource, so tokens strictly increase across
-- all grants; a token is 2^62 + timeline × 2^40 + the sequence's value (token-source.ts says
-- why). Each token is durable before the caller sees it, even on a server that runs with
-- synchronous_commit = off:
-- - set_config('synchronous_commit', 'on', true) is transaction-local, so it still holds when
--   the caller's (autocommit) transaction commits. A SET synchronous_commit = on clause on the
--   function would be undone when the function returns, before the commit.
-- - nextval writes WAL only once every 32 values and assigns a transaction id only then; a
--   commit without an xid writes no commit record and flushes nothing. pg_current_xact_id()
--   gives every call an xid, so every commit flushes WAL up to its commit record, which covers
--   the sequence's last logged value whichever transaction wrote it.
CREATE SCHEMA IF NOT EXISTS pgfence;

CREATE SEQUENCE IF NOT EXISTS pgfence.token_seq AS bigint MINVALUE 1 NO CYCLE;

-- The server's timeline (token-source.ts: currentTimelineSql). It grows at every promotion. On a
-- standby: 55000, as no write may happen there.
CREATE OR REPLACE FUNCTION pgfence.timeline() RETURNS bigint
LANGUAGE sql STABLE
AS $$
  SELECT {{current_timeline}}
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
  IF seq >= {{sequence_span}} THEN
    RAISE EXCEPTION USING ERRCODE = '2200H', MESSAGE = 'pgfence.token_seq is above 2^40',
      HINT = 'tokens keep the timeline above the sequence''s 40 bits: ALTER SEQUENCE pgfence.token_seq RESTART';
  END IF;
  RETURN {{epoch_tag}} + pgfence.timeline() * {{sequence_span}} + seq;
END
$$;

-- A write with a token next_token() issued before a promotion: that failover may have lost the
-- writes of newer tokens (asynchronous standbys), so the token is invalidated. Timeline 0 and
-- those above this server's are no tokens of next_token() here: other issuers' (up to 2^63-1).
CREATE OR REPLACE FUNCTION pgfence.epoch_check(token bigint, rel text, col text)
RETURNS void LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  issued bigint := (token - {{epoch_tag}}) / {{sequence_span}};
  current bigint := pgfence.timeline();
BEGIN
  IF issued BETWEEN 1 AND current - 1 THEN
    PERFORM pgfence.refuse('PF409', {{stale_token_message}},
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
  SELECT coalesce({{epoch_tag}} + pgfence.timeline() * {{sequence_span}}
    + pg_sequence_last_value('pgfence.token_seq'::regclass), 0)
$$;
