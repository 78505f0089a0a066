/**
 * The one walk of inheritance trees (partitions and inheritance children, at any depth), as the
 * recursive CTE `tree(root, relid, depth, path)`: each table with its root, its depth (0: the
 * root) and the path from the root down to its parent. `roots`: a FROM item with one oid column
 * named r. pgfence.inheritance_tree (sql/helpers.sql) is this walk; the proxy's check for
 * unfenced descendants runs it itself, since it must work where that function is not installed.
 */
export const inheritanceWalk = (roots: string): string => `tree(root, relid, depth, path) AS (
    SELECT r, r, 0, ARRAY[]::oid[] FROM ${roots}
    UNION ALL
    SELECT t.root, i.inhrelid, t.depth + 1, t.path || t.relid
      FROM pg_catalog.pg_inherits i JOIN tree t ON i.inhparent = t.relid
  )`
