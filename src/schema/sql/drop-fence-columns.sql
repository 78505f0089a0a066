-- pgfence uninstall --drop-fence-columns: the fence columns of the config's tables
-- (given as [relation, column] pairs) and of every table pgfence migrate
-- recorded in pgfence.row_fences (tables an earlier config fenced). A partition has its
-- parent's column, and loses it with the parent.
DO $do$
DECLARE
  configured jsonb := {{configured_fence_columns}};
  recorded jsonb := '[]';
  fence record;
BEGIN
  IF pg_catalog.to_regclass('pgfence.row_fences') IS NOT NULL THEN
    EXECUTE $q$SELECT coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(relid::regclass::text, col)), '[]')
                 FROM pgfence.row_fences$q$ INTO recorded;
  END IF;
  FOR fence IN
    SELECT DISTINCT pg_catalog.to_regclass(f ->> 0) AS rel, f ->> 1 AS col
      FROM pg_catalog.jsonb_array_elements(configured || recorded) AS f
  LOOP
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = fence.rel AND NOT c.relispartition) THEN
      EXECUTE pg_catalog.format('ALTER TABLE %s DROP COLUMN IF EXISTS %I', fence.rel, fence.col);
    END IF;
  END LOOP;
END
$do$;
