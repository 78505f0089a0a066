-- What pgfence uninstall removes before the pgfence schema itself (src/schema/uninstall.ts).

-- The triggers whose functions are pgfence's: fence rows, TRUNCATE refusals, resource gates,
-- and those of earlier versions. A partitioned table's clones go with its own trigger.
DO $do$
DECLARE
  trigger record;
BEGIN
  FOR trigger IN
    SELECT t.tgname, t.tgrelid::regclass AS rel
      FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid = t.tgfoid
     WHERE p.pronamespace = pg_catalog.to_regnamespace('pgfence') AND t.tgparentid = 0
  LOOP
    EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS %I ON %s', trigger.tgname, trigger.rel);
  END LOOP;
END
$do$;

-- DROP SCHEMA ... CASCADE would take the database's own objects that use pgfence's functions,
-- tables or sequence (a view, a function, a column default) with it: uninstall is refused
-- instead, naming them.
DO $do$
DECLARE
  dependents text;
BEGIN
  WITH inside AS (
    SELECT 'pg_catalog.pg_proc'::regclass AS classid, oid FROM pg_catalog.pg_proc
     WHERE pronamespace = pg_catalog.to_regnamespace('pgfence')
    UNION ALL
    SELECT 'pg_catalog.pg_class'::regclass, oid FROM pg_catalog.pg_class
     WHERE relnamespace = pg_catalog.to_regnamespace('pgfence')
    UNION ALL
    SELECT 'pg_catalog.pg_type'::regclass, oid FROM pg_catalog.pg_type
     WHERE typnamespace = pg_catalog.to_regnamespace('pgfence')
  ), dependent AS (
    -- A view's rule or a column's default stands for its relation.
    SELECT coalesce(o.refclassid, d.classid) AS classid, coalesce(o.refobjid, d.objid) AS objid
      FROM pg_catalog.pg_depend d
      JOIN inside i ON d.refclassid = i.classid AND d.refobjid = i.oid
      LEFT JOIN pg_catalog.pg_depend o ON o.classid = d.classid AND o.objid = d.objid
       AND o.deptype IN ('i', 'a')
     WHERE d.deptype = 'n'
  )
  SELECT pg_catalog.string_agg(DISTINCT pg_catalog.pg_describe_object(classid, objid, 0), ', ')
    INTO dependents
    FROM dependent
   WHERE (pg_catalog.pg_identify_object(classid, objid, 0)).schema IS DISTINCT FROM 'pgfence';
  IF dependents IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = '2BP01',
      MESSAGE = 'objects of the database depend on the pgfence schema: ' || dependents,
      HINT = 'drop them or change them not to use pgfence first; nothing was removed';
  END IF;
END
$do$;
