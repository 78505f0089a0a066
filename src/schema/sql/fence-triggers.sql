-- The maintenance switch, the trigger functions and pgfence.fence_table, which installs them on
-- a fenced table, its partitions and its inheritance children. The row trigger is the one check
-- of every write to a fenced row, whatever path it takes: it sets the fence column to the
-- presented token, or raises.
DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{{maintenance_role}}') THEN
    CREATE ROLE {{maintenance_role}} NOLOGIN;
  END IF;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'pgfence: cannot create role {{maintenance_role}}; only superusers may use pgfence.maintenance until it exists';
END
$do$;

-- pgfence.maintenance: false when off; true when on for a superuser or a member of
-- {{maintenance_role}}; 42501 when on for anyone else.
CREATE OR REPLACE FUNCTION pgfence.maintenance() RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  raw text := pg_catalog.current_setting('pgfence.maintenance', true);
BEGIN
  IF coalesce(raw, '') IN ('', 'off') OR NOT raw::boolean THEN
    RETURN false;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '{{maintenance_role}}')
     AND pg_catalog.pg_has_role('{{maintenance_role}}', 'MEMBER') THEN
    RETURN true;
  END IF;
  IF coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), false) THEN
    RETURN true;
  END IF;
  RAISE EXCEPTION USING ERRCODE = '42501',
    MESSAGE = 'permission denied to write fenced tables with pgfence.maintenance on',
    DETAIL = 'role ' || current_user || ' is neither a superuser nor a member of {{maintenance_role}}',
    HINT = 'RESET pgfence.maintenance and present a fencing token, or GRANT {{maintenance_role}} TO '
      || current_user;
END
$fn$;

-- The full check of one row, for rows the fast path of its trigger did not admit: the row's new
-- fence value, or PF409/PF428/PF400/PF501. committed is NULL on INSERT, written on DELETE.
CREATE OR REPLACE FUNCTION pgfence.check_row(
  op text, committed bigint, written bigint, col text, setting text, required boolean,
  unissued boolean, rel text
) RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
  marker text := {{marker_value}};
  token bigint;
BEGIN
  IF pgfence.maintenance() THEN
    RETURN written;
  END IF;
  token := CASE WHEN unissued
    THEN pgfence.issued_token(marker, setting, required, rel, col)
    ELSE pgfence.parse_token(marker, setting, required, rel, col) END;
  -- Left as it was (or the column default on INSERT): pgfence sets it. Anything else but the
  -- token is a write to the fence column itself.
  IF op <> 'DELETE' AND written IS DISTINCT FROM coalesce(committed, 0)
     AND written IS DISTINCT FROM token THEN
    PERFORM pgfence.refuse('PF501', {{fence_column_write_message}},
      pg_catalog.format({{fence_column_write_detail}}, col, rel), {{fence_column_write_hint}},
      rel, col);
  END IF;
  IF token IS NOT NULL AND committed IS NOT NULL THEN
    PERFORM pgfence.advance(committed, token, rel, col);
  END IF;
  IF token IS NULL AND op = 'UPDATE' THEN
    RETURN written;
  END IF;
  RETURN coalesce(token, 0);
END
$fn$;

-- The row trigger function of one fence column and token setting (PL/pgSQL cannot name a column
-- by a value, so each gets its own; the setting and rejectUnissuedTokens are written into it).
-- Trigger arguments: token setting, requireToken, rejectUnissuedTokens, for check_row.
-- It is the only check of a fenced row and sets the fence column to the presented token. An
-- UPDATE that does not lower the column reads the token first; three usual cases are then one
-- condition of built-ins each, and any other row goes to check_row:
-- - the token is the column's new value, as its text, with maintenance never set in the session:
--   the same token again (the column left as it was), or the one pgfence's rewrite of an UPDATE
--   with a comment token sets the column to. No digit check, cast or assignment; not for a token
--   of next_token() (19 digits, from EPOCH_TAG up), whose timeline needs checking;
-- - a token of up to 18 digits, no lower than the committed one, the column left to pgfence,
--   maintenance off: the column is set to it;
-- - a token of next_token() issued on this server's timeline or a later one (those epoch_check
--   admits), no lower than the committed one, the column left to pgfence or set to the token,
--   maintenance off: the column is set to it. Every token pgfence issues is one: without this
--   case each of their rows would take check_row, which costs as much again as the whole write.
-- INSERT and DELETE have the last two cases too, after the TG_OP test.
-- PL/pgSQL keeps the function compiled for the session but sets each expression up again in
-- every transaction, at a cost per node it names (more for a function or operator, which is also
-- checked for EXECUTE): so the usual paths name few, and only the expressions a row reaches are
-- set up. STABLE, because a volatile PL/pgSQL function advances the command counter and takes a
-- new snapshot before each expression it evaluates; this one reads no table (check_row, which
-- does, is volatile and takes its own).
CREATE OR REPLACE FUNCTION pgfence.create_row_function(col text, setting text, unissued boolean)
RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
  name text := 'pgfence.' || pg_catalog.quote_ident({{row_function_name}});
  -- The token as the row trigger reads it: the proxy's statement marker, else the session
  -- setting (one CASE where a coalesce would wrap one: split_part never gives NULL).
  row_token text := $sql$CASE WHEN pg_catalog.starts_with(pg_catalog.current_query(), {{statement_token_prefix}}) THEN pg_catalog.split_part(pg_catalog.current_query(), '''', 2)
    ELSE pg_catalog.current_setting({setting}, true) END$sql$;
  -- The usual token (1 to 18 digits, so the cast cannot fail) with maintenance off. translate
  -- makes every digit a 0 and leaves any other character as it is; the result first occurs in
  -- 'x' and 18 zeros at position 2 exactly when it is 1 to 18 zeros (an empty text is found at
  -- 1, one with any other character at 1 or nowhere): two functions and an operator, where
  -- length BETWEEN (which names length twice) and ltrim took six.
  usual_token text := $sql$pg_catalog.strpos('x000000000000000000', pg_catalog.translate(token, '123456789', '000000000')) = 2
        AND coalesce(pg_catalog.current_setting('pgfence.maintenance', true), '') IN ('', 'off')$sql$;
  -- A token of next_token() (19 digits from EPOCH_TAG up: in the C collation, texts of 19
  -- digits order as their numbers, so the cast cannot fail) with maintenance off. Only rows the
  -- usual paths leave reach it (the others go on to check_row).
  issued_token text := $sql$pg_catalog.length(token) = 19
        AND pg_catalog.translate(token, '123456789', '000000000') = '0000000000000000000'
        AND token COLLATE "C" BETWEEN '{{epoch_tag}}' AND '9223372036854775807'
        AND coalesce(pg_catalog.current_setting('pgfence.maintenance', true), '') IN ('', 'off')$sql$;
  -- Issued on this server's timeline or a later one: what epoch_check admits, with built-ins
  -- (a call of pgfence.timeline() runs a query).
  this_timeline text := $sql$(token::bigint - {{epoch_tag}}) / {{sequence_span}} >= {{current_timeline}}$sql$;
  -- The relation the trigger fires on, as check_row names it.
  relation text := $sql$pg_catalog.quote_ident(TG_TABLE_SCHEMA) || '.' || pg_catalog.quote_ident(TG_TABLE_NAME)$sql$;
BEGIN
  -- {column}: the fence column as an identifier; {fast}: whether the usual paths apply (not
  -- with rejectUnissuedTokens, whose check needs the highest issued token).
  EXECUTE pgfence.fill_template($def$
CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql STABLE AS $body$
DECLARE
  token text;
BEGIN
  -- Before the TG_OP test, which costs as much: outside an UPDATE, NEW or OLD is NULL.
  IF {fast} AND NEW.{column} >= OLD.{column} THEN
    token := {row_token};
    IF token = NEW.{column}::text AND NEW.{column} < {{epoch_tag}}
       AND pg_catalog.current_setting('pgfence.maintenance', true) IS NULL THEN
      RETURN NEW;
    END IF;
    IF (CASE WHEN NEW.{column} = OLD.{column} AND {usual_token} THEN token::bigint >= OLD.{column}
        ELSE false END) THEN
      NEW.{column} := token::bigint;
      RETURN NEW;
    END IF;
    IF (CASE WHEN {issued_token} THEN token::bigint >= OLD.{column}
          AND (NEW.{column} = OLD.{column} OR NEW.{column} = token::bigint) AND {this_timeline}
        ELSE false END) THEN
      NEW.{column} := token::bigint;
      RETURN NEW;
    END IF;
  END IF;
  IF TG_OP = 'UPDATE' THEN
    NEW.{column} := pgfence.check_row(TG_OP, OLD.{column}, NEW.{column}, {column_literal}, TG_ARGV[0],
      TG_ARGV[1]::boolean, TG_ARGV[2]::boolean, {relation});
    RETURN NEW;
  END IF;
  token := {row_token};
  IF TG_OP = 'INSERT' THEN
    IF (CASE WHEN {fast} AND NEW.{column} = 0 AND {usual_token} THEN true ELSE false END) THEN
      NEW.{column} := token::bigint;
      RETURN NEW;
    END IF;
    IF (CASE WHEN {fast} AND NEW.{column} = 0 AND {issued_token} THEN {this_timeline} ELSE false END) THEN
      NEW.{column} := token::bigint;
      RETURN NEW;
    END IF;
    NEW.{column} := pgfence.check_row(TG_OP, NULL, NEW.{column}, {column_literal}, TG_ARGV[0],
      TG_ARGV[1]::boolean, TG_ARGV[2]::boolean, {relation});
    RETURN NEW;
  END IF;
  IF (CASE WHEN {fast} AND {usual_token} THEN token::bigint >= OLD.{column} ELSE false END) THEN
    RETURN OLD;
  END IF;
  IF (CASE WHEN {fast} AND {issued_token} THEN token::bigint >= OLD.{column} AND {this_timeline}
      ELSE false END) THEN
    RETURN OLD;
  END IF;
  PERFORM pgfence.check_row(TG_OP, OLD.{column}, NULL, {column_literal}, TG_ARGV[0], TG_ARGV[1]::boolean,
    TG_ARGV[2]::boolean, {relation});
  RETURN OLD;
END
$body$
$def$, pg_catalog.jsonb_build_object(
    'function', name,
    'column', pg_catalog.quote_ident(col),
    'column_literal', pg_catalog.quote_nullable(col),
    'row_token', pgfence.fill_template(row_token,
      pg_catalog.jsonb_build_object('setting', pg_catalog.quote_nullable(setting))),
    'usual_token', usual_token,
    'issued_token', issued_token,
    'this_timeline', this_timeline,
    'relation', relation,
    'fast', CASE WHEN unissued THEN 'false' ELSE 'true' END));
  RETURN name;
END
$fn$;
DROP FUNCTION IF EXISTS pgfence.create_row_function(text);

CREATE OR REPLACE FUNCTION pgfence.refuse_truncate() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  rel text := pg_catalog.quote_ident(TG_TABLE_SCHEMA) || '.' || pg_catalog.quote_ident(TG_TABLE_NAME);
BEGIN
  IF NOT pgfence.maintenance() THEN
    PERFORM pgfence.refuse('PF501', {{truncate_message}},
      pg_catalog.format({{truncate_detail}}, rel), {{truncate_hint}}, rel, TG_ARGV[0]);
  END IF;
  RETURN NULL;
END
$fn$;

-- (Re)creates one trigger, enabled for every role and under session_replication_role = replica.
CREATE OR REPLACE FUNCTION pgfence.create_trigger(rel regclass, name text, timing text, body text)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS %I ON %s', name, rel);
  EXECUTE pg_catalog.format('CREATE TRIGGER %I %s ON %s %s', name, timing, rel, body);
  EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ALWAYS TRIGGER %I', rel, name);
END
$fn$;

-- The row trigger of one table. On a partitioned table PostgreSQL clones it to every partition,
-- present and future; a partition that has it from its parent keeps that. The triggers of
-- earlier versions (one per operation, with WHEN conditions) are dropped.
CREATE OR REPLACE FUNCTION pgfence.create_row_triggers(
  rel regclass, col text, setting text, required boolean, unissued boolean
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  old text;
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
              WHERE tgrelid = rel AND tgname = {{row_fence_trigger}} AND tgparentid <> 0) THEN
    RETURN;
  END IF;
  FOREACH old IN ARRAY ARRAY['pgfence_fence_insert', 'pgfence_fence_update', 'pgfence_fence_delete'] LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS %I ON %s', old, rel);
  END LOOP;
  PERFORM pgfence.create_trigger(rel, {{row_fence_trigger}}, 'BEFORE INSERT OR UPDATE OR DELETE',
    pg_catalog.format('FOR EACH ROW EXECUTE FUNCTION %s(%L, %L, %L)',
      pgfence.create_row_function(col, setting, unissued), setting, required, unissued));
END
$fn$;

-- Everything one fenced table needs: its fence column (partitions inherit it), its triggers and
-- those of its inheritance children, and a TRUNCATE trigger on every descendant (statement
-- triggers are not cloned to partitions).
CREATE OR REPLACE FUNCTION pgfence.fence_table(
  rel regclass, col text, setting text, required boolean, unissued boolean
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  member record;
BEGIN
  IF NOT (SELECT relispartition FROM pg_catalog.pg_class WHERE oid = rel) THEN
    EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS %I bigint NOT NULL DEFAULT 0', rel, col);
  END IF;
  FOR member IN
    SELECT t.relid::regclass AS relid, c.relispartition
      FROM pgfence.inheritance_tree(ARRAY[rel::oid]) t JOIN pg_catalog.pg_class c ON c.oid = t.relid
  LOOP
    IF member.relid = rel OR NOT member.relispartition THEN
      PERFORM pgfence.create_row_triggers(member.relid, col, setting, required, unissued);
    END IF;
    PERFORM pgfence.create_trigger(member.relid, {{truncate_fence_trigger}}, 'BEFORE TRUNCATE',
      pg_catalog.format('FOR EACH STATEMENT EXECUTE FUNCTION pgfence.refuse_truncate(%L)', col));
  END LOOP;
END
$fn$;
