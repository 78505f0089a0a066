/**
 * The version of the pgfence schema this pgfence installs and understands. Version 1 is the
 * schema of the releases before versions were recorded: a pgfence schema without a version
 * mark. Each version's install runs over any earlier one and upgrades it in place (CREATE OR
 * REPLACE, IF NOT EXISTS, and drops of the objects earlier versions had), so fences, fence
 * columns and the token sequence are kept.
 */
export const SCHEMA_VERSION = 3

/**
 * The mark is the pgfence schema's comment: readable with the catalog alone, by any role and
 * in a database where the schema is missing or of an earlier version, so one query tells the
 * three apart without an error.
 */
const markPrefix = 'pgfence schema version '

/** Sets the mark, at the end of the install. */
export const markVersionSql = `COMMENT ON SCHEMA pgfence IS '${markPrefix}${SCHEMA_VERSION}';`

/** The installed version as SQL: NULL without a pgfence schema, 1 for an unmarked one. */
const installedVersionExpr = `(SELECT CASE WHEN s.oid IS NOT NULL THEN coalesce(pg_catalog.substring(
    pg_catalog.obj_description(s.oid, 'pg_namespace'), '^${markPrefix}([0-9]{1,9})$')::int, 1) END
  FROM (SELECT pg_catalog.to_regnamespace('pgfence')::oid AS oid) s)`

/** One catalog query (simple protocol): column `version`, NULL when there is no pgfence schema. */
export const installedVersionSql = `SELECT ${installedVersionExpr} AS version`

/** The installed version of a row of installedVersionSql (text or number); null: none. */
export function installedVersion(row: Record<string, unknown> | undefined): number | null {
  const value = row?.version
  return value === null || value === undefined ? null : Number(value)
}

/**
 * Run by the install after it took the migration lock: a schema newer than this pgfence is
 * never downgraded (its objects may mean something this version does not know).
 */
export const refuseNewerSql = `DO $do$
DECLARE
  installed int := ${installedVersionExpr};
BEGIN
  IF installed > ${SCHEMA_VERSION} THEN
    RAISE EXCEPTION USING ERRCODE = '55000',
      MESSAGE = 'pgfence schema version ' || installed || ' in this database is newer than this pgfence understands (' || ${SCHEMA_VERSION} || ')',
      HINT = 'run the pgfence release that installed it, or a later one';
  END IF;
END
$do$;`

/** What a database's pgfence schema lacks for this pgfence, in the words of an error. */
export interface SchemaMismatch {
  message: string
  detail: string
  hint: string
}

/** Null when the installed version is this pgfence's. */
export function schemaMismatch(installed: number | null): SchemaMismatch | null {
  if (installed === SCHEMA_VERSION) return null
  if (installed === null) {
    return {
      message: 'pgfence migrate has not run in this database',
      detail:
        'the database has no pgfence schema, whose functions fence the writes to the tables the config fences',
      hint: 'run pgfence migrate',
    }
  }
  const message = `pgfence schema version ${installed} in this database, this pgfence needs ${SCHEMA_VERSION}`
  if (installed < SCHEMA_VERSION) {
    return {
      message,
      detail: 'writes to fenced tables through pgfence are refused until the schema is upgraded',
      hint: 'run pgfence migrate: it upgrades the schema in place, keeping fences and tokens',
    }
  }
  return {
    message,
    detail:
      'the schema is newer than this pgfence understands: writes to fenced tables through it are refused',
    hint: `run a pgfence release that understands schema version ${installed}`,
  }
}
