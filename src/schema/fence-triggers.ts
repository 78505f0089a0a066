import { statementTokenPrefix } from '../rewrite/statement-marker.js'
import { escapeRegex, quoteLiteral } from '../rewrite/sql-text.js'

/** The role whose members (and superusers) may write fenced tables with maintenance on. */
export const maintenanceRole = 'pgfence_maintenance'

/** The value of the proxy's statement marker, read with one anchored match. */
const markerValueSql = `pg_catalog.substring(pg_catalog.current_query(), ${quoteLiteral(
  `^${escapeRegex(statementTokenPrefix)}([^']*)'`,
)})`

/**
 * The token a statement presents, as a trigger reads it with built-ins only: the proxy's marker
 * at the very start of the statement text (where it cannot sit inside a literal), else the
 * session setting. `setting` is an SQL literal. A trigger's WHEN is set up anew for every
 * statement, so it is kept small.
 */
export const effectiveTokenSql = (setting: string): string =>
  `coalesce(${markerValueSql}, pg_catalog.current_setting(${setting}, true))`

/**
 * The maintenance switch, the trigger functions and `pgfence.fence_table`, which installs them on
 * a fenced table, its partitions and its inheritance children. The row triggers' WHEN conditions
 * are built-ins that admit the usual case (the proxy's rewrite already set the fence column to
 * the presented token): only other rows call PL/pgSQL.
 */
export const fenceTriggersSql = `
DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '${maintenanceRole}') THEN
    CREATE ROLE ${maintenanceRole} NOLOGIN;
  END IF;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'pgfence: cannot create role ${maintenanceRole}; only superusers may use pgfence.maintenance until it exists';
END
$do$;

-- pgfence.maintenance: false when off; true when on for a superuser or a member of
-- ${maintenanceRole}; 42501 when on for anyone else.
CREATE OR REPLACE FUNCTION pgfence.maintenance() RETURNS boolean
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
  raw text := pg_catalog.current_setting('pgfence.maintenance', true);
BEGIN
  IF coalesce(raw, '') IN ('', 'off') OR NOT raw::boolean THEN
    RETURN false;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = '${maintenanceRole}')
     AND pg_catalog.pg_has_role('${maintenanceRole}', 'MEMBER') THEN
    RETURN true;
  END IF;
  IF coalesce((SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user), false) THEN
    RETURN true;
  END IF;
  RAISE EXCEPTION USING ERRCODE = '42501',
    MESSAGE = 'permission denied to write fenced tables with pgfence.maintenance on',
    DETAIL = 'role ' || current_user || ' is neither a superuser nor a member of ${maintenanceRole}',
    HINT = 'RESET pgfence.maintenance and present a fencing token, or GRANT ${maintenanceRole} TO '
      || current_user;
END
$fn$;

-- The full check of one row, for rows the WHEN condition did not admit. Arguments: fence column,
-- token setting, requireToken, rejectUnissuedTokens.
CREATE OR REPLACE FUNCTION pgfence.fence_row() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  col text := TG_ARGV[0];
  setting text := TG_ARGV[1];
  rel text := pg_catalog.quote_ident(TG_TABLE_SCHEMA) || '.' || pg_catalog.quote_ident(TG_TABLE_NAME);
  marker text := ${markerValueSql};
  token bigint;
  committed bigint;
  written bigint;
BEGIN
  IF pgfence.maintenance() THEN
    RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
  END IF;
  token := CASE WHEN TG_ARGV[3]::boolean
    THEN pgfence.issued_token(marker, setting, TG_ARGV[2]::boolean, rel, col)
    ELSE pgfence.parse_token(marker, setting, TG_ARGV[2]::boolean, rel, col) END;
  IF TG_OP <> 'INSERT' THEN
    committed := (pg_catalog.to_jsonb(OLD) ->> col)::bigint;
  END IF;
  IF TG_OP <> 'DELETE' THEN
    written := (pg_catalog.to_jsonb(NEW) ->> col)::bigint;
    -- Left as it was (or the column default on INSERT): pgfence sets it. Anything else but the
    -- token is a write to the fence column itself.
    IF written IS DISTINCT FROM coalesce(committed, 0) AND written IS DISTINCT FROM token THEN
      PERFORM pgfence.refuse('PF501', 'the fence column of a fenced table cannot be written directly',
        'column ' || col || ' of table ' || rel || ' is maintained by pgfence',
        'remove the fence column from the statement; pgfence sets it to the presented token',
        rel, col);
    END IF;
  END IF;
  IF token IS NOT NULL AND committed IS NOT NULL THEN
    PERFORM pgfence.advance(committed, token, rel, col);
  END IF;
  IF TG_OP = 'DELETE' THEN
    RETURN OLD;
  END IF;
  IF token IS NULL AND TG_OP = 'UPDATE' THEN
    RETURN NEW;
  END IF;
  RETURN pg_catalog.jsonb_populate_record(NEW, pg_catalog.jsonb_build_object(col, coalesce(token, 0)));
END
$fn$;

CREATE OR REPLACE FUNCTION pgfence.refuse_truncate() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
  rel text := pg_catalog.quote_ident(TG_TABLE_SCHEMA) || '.' || pg_catalog.quote_ident(TG_TABLE_NAME);
BEGIN
  IF NOT pgfence.maintenance() THEN
    PERFORM pgfence.refuse('PF501', 'TRUNCATE is not supported on a fenced table',
      'table ' || rel || ' is fenced; TRUNCATE removes rows without checking their tokens',
      'use DELETE, which pgfence fences', rel, TG_ARGV[0]);
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

-- The row triggers of one table. On a partitioned table PostgreSQL clones them to every
-- partition, present and future; a partition that has them from its parent keeps those.
CREATE OR REPLACE FUNCTION pgfence.create_row_triggers(
  rel regclass, col text, setting text, required boolean, unissued boolean
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  token text := pg_catalog.format($t$${effectiveTokenSql('%L')}$t$, setting);
  -- Set once in a session it is never NULL again; any value but NULL or '' calls the function.
  maintenance text := 'pg_catalog.current_setting(''pgfence.maintenance'', true) > ''''';
  args text := pg_catalog.format('pgfence.fence_row(%L, %L, %L, %L)', col, setting, required, unissued);
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger
              WHERE tgrelid = rel AND tgname = 'pgfence_fence_update' AND tgparentid <> 0) THEN
    RETURN;
  END IF;
  PERFORM pgfence.create_trigger(rel, 'pgfence_fence_insert', 'BEFORE INSERT', pg_catalog.format(
    'FOR EACH ROW WHEN (NEW.%1$I::text IS DISTINCT FROM %2$s OR %3$s) EXECUTE FUNCTION %4$s',
    col, token, maintenance, args));
  PERFORM pgfence.create_trigger(rel, 'pgfence_fence_update', 'BEFORE UPDATE', pg_catalog.format(
    'FOR EACH ROW WHEN (NEW.%1$I::text IS DISTINCT FROM %2$s OR NEW.%1$I < OLD.%1$I OR %3$s) EXECUTE FUNCTION %4$s',
    col, token, maintenance, args));
  PERFORM pgfence.create_trigger(rel, 'pgfence_fence_delete', 'BEFORE DELETE', pg_catalog.format(
    'FOR EACH ROW WHEN (CASE WHEN %2$s ~ ''^[0-9]{1,18}$'' THEN %2$s::bigint < OLD.%1$I ELSE true END OR %3$s) EXECUTE FUNCTION %4$s',
    col, token, maintenance, args));
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
    WITH RECURSIVE tree(relid) AS (
      SELECT rel::oid
      UNION ALL
      SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN tree ON i.inhparent = tree.relid
    )
    SELECT tree.relid::regclass AS relid, c.relispartition, c.relkind
      FROM tree JOIN pg_catalog.pg_class c ON c.oid = tree.relid
  LOOP
    IF member.relid = rel OR NOT member.relispartition THEN
      PERFORM pgfence.create_row_triggers(member.relid, col, setting, required, unissued);
    END IF;
    PERFORM pgfence.create_trigger(member.relid, 'pgfence_fence_truncate', 'BEFORE TRUNCATE',
      pg_catalog.format('FOR EACH STATEMENT EXECUTE FUNCTION pgfence.refuse_truncate(%L)', col));
  END LOOP;
END
$fn$;
`
