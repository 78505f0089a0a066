-- The PL/pgSQL helpers that the fence triggers, the resource gates and the proxy's own
-- compare-and-raise (for tables without their trigger, fence-rewrite.ts) call. Every rejection is
-- raised inside PostgreSQL, so clients get real ErrorResponses and the transaction is aborted as
-- usual. Their words are filled in from src/rewrite (token-refusals.ts, refusal-texts.ts), shared with the
-- proxy's own refusals.
--
-- `rel` is the relation as the statement names it (identifiers quoted); it is resolved with the
-- caller's search_path only when an error is raised, to fill the SCHEMA and TABLE fields.

-- Every table in the inheritance trees of `roots` (partitions and inheritance children, at any
-- depth), with its root, its depth (0: the root) and the path from the root down to its parent.
CREATE OR REPLACE FUNCTION pgfence.inheritance_tree(roots oid[])
RETURNS TABLE (root oid, relid oid, depth int, path oid[]) LANGUAGE sql STABLE AS $fn$
  WITH RECURSIVE {{inheritance_walk}}
  SELECT tree.root, tree.relid, tree.depth, tree.path FROM tree
$fn$;

-- A template with each {name} replaced by the value of that key in `vals`, in one pass (a value
-- is never read as a template): the template has no other braces.
CREATE OR REPLACE FUNCTION pgfence.fill_template(template text, vals jsonb)
RETURNS text LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  parts text[] := pg_catalog.regexp_split_to_array(template, '[{}]');
  filled text := '';
BEGIN
  FOR i IN 1 .. pg_catalog.array_length(parts, 1) LOOP
    IF i % 2 = 1 THEN
      filled := filled || parts[i];
    ELSIF vals ? parts[i] THEN
      filled := filled || (vals ->> parts[i]);
    ELSE
      RAISE EXCEPTION 'pgfence.fill_template: no value for {%}', parts[i];
    END IF;
  END LOOP;
  RETURN filled;
END
$fn$;

CREATE OR REPLACE FUNCTION pgfence.refuse(
  code text, message text, detail text, hint text, rel text, col text
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  relid regclass := CASE WHEN rel IS NULL THEN NULL ELSE pg_catalog.to_regclass(rel) END;
  nsp text := '';
  tbl text := coalesce(rel, '');
BEGIN
  IF relid IS NOT NULL THEN
    SELECT n.nspname, c.relname INTO nsp, tbl
      FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = relid;
  END IF;
  RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message, DETAIL = coalesce(detail, ''),
    HINT = coalesce(hint, ''), SCHEMA = nsp, TABLE = tbl, COLUMN = coalesce(col, '');
END
$fn$;

CREATE OR REPLACE FUNCTION pgfence.relation_name(rel text) RETURNS text
LANGUAGE sql STABLE AS $fn$
  SELECT coalesce(
    (SELECT pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname)
       FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
      WHERE c.oid = pg_catalog.to_regclass(rel)),
    rel)
$fn$;

-- The full reading of a token: absent (PF428 when required), invalid (PF400), or its value.
CREATE OR REPLACE FUNCTION pgfence.parse_token(
  comment_token text, setting text, required boolean, rel text, col text
) RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  raw text := coalesce(comment_token, pg_catalog.current_setting(setting, true));
BEGIN
  -- Maintenance: no token and no check (rare, so tested only here, off the usual path).
  IF pgfence.maintenance() THEN
    RETURN NULL;
  END IF;
  IF comment_token IS NULL AND coalesce(raw, '') = '' THEN
    IF required THEN
      -- The HINT names only what works on any connection: the proxy gives its own.
      PERFORM pgfence.refuse('PF428', {{token_required_message}},
        pg_catalog.format({{token_required_detail}}, pgfence.relation_name(rel)),
        pg_catalog.format({{direct_token_hint}}, setting, setting),
        rel, col);
    END IF;
    RETURN NULL;
  END IF;
  IF raw !~ '^[0-9]+$' OR raw::numeric > 9223372036854775807 THEN
    -- The statement marker carries an invalid comment token as '-' (statement-marker.ts).
    PERFORM pgfence.refuse('PF400', {{invalid_token_message}},
      pg_catalog.format({{invalid_token_detail}}, CASE WHEN comment_token = '-'
        THEN {{invalid_comment_token}} ELSE pg_catalog.quote_literal(raw) END),
      {{invalid_token_hint}}, rel, col);
  END IF;
  IF raw::bigint >= {{epoch_tag}} THEN
    PERFORM pgfence.epoch_check(raw::bigint, rel, col);
  END IF;
  RETURN raw::bigint;
END
$fn$;

-- The token a statement presents, for the resource fences' gates: the usual case (up to 18
-- digits) is one expression, the rarer cases go to parse_token.
CREATE OR REPLACE FUNCTION pgfence.token(
  comment_token text, setting text, required boolean, rel text, col text
) RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN CASE
    WHEN coalesce(comment_token, pg_catalog.current_setting(setting, true)) ~ '^[0-9]{1,18}$'
      THEN coalesce(comment_token, pg_catalog.current_setting(setting, true))::bigint
    ELSE pgfence.parse_token(comment_token, setting, required, rel, col)
  END;
END
$fn$;

CREATE OR REPLACE FUNCTION pgfence.stale(
  committed bigint, incoming bigint, rel text, col text
) RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  IF pgfence.maintenance() THEN
    RETURN committed;
  END IF;
  PERFORM pgfence.refuse('PF409', {{stale_token_message}},
    pg_catalog.format({{stale_token_detail}}, incoming, committed, 'table ' || pgfence.relation_name(rel)),
    {{stale_token_hint}}, rel, col);
  RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION pgfence.advance(
  committed bigint, incoming bigint, rel text, col text
) RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN CASE
    WHEN incoming IS NULL THEN committed
    WHEN committed IS NULL OR incoming >= committed THEN incoming
    ELSE pgfence.stale(committed, incoming, rel, col)
  END;
END
$fn$;

-- The proxy's own compare-and-raise of one row, for a table whose fence trigger it does not know
-- to be there (fence-rewrite.ts): the new fence value, or PF409/PF428/PF400.
CREATE OR REPLACE FUNCTION pgfence.advance_token(
  committed bigint, comment_token text, setting text, required boolean, rel text, col text,
  unissued boolean
) RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
BEGIN
  RETURN pgfence.advance(committed, CASE
    WHEN unissued THEN pgfence.issued_token(comment_token, setting, required, rel, col)
    ELSE pgfence.parse_token(comment_token, setting, required, rel, col) END, rel, col);
END
$fn$;

-- rejectUnissuedTokens: a token above the highest one pgfence.next_token() has issued is refused,
-- so a typo cannot lock every real holder out forever.
CREATE OR REPLACE FUNCTION pgfence.issued_token(
  comment_token text, setting text, required boolean, rel text, col text
) RETURNS bigint LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  token bigint := pgfence.token(comment_token, setting, required, rel, col);
  highest bigint;
BEGIN
  IF token IS NULL THEN
    RETURN NULL;
  END IF;
  highest := pgfence.last_issued_token();
  IF token > highest THEN
    PERFORM pgfence.refuse('PF400', {{invalid_token_message}},
      'fencing token ' || token || ' was never issued: the highest token pgfence.next_token() '
        || 'has issued is ' || highest,
      {{invalid_token_hint}}, rel, col);
  END IF;
  RETURN token;
END
$fn$;

