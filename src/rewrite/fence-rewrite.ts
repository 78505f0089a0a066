import { and, expr, tokenCall, type Node, type TokenSource } from './ast.js'
import { quoteIdent, quoteLiteral } from './sql-text.js'
import { allDefault, isExcludedFence, refuse, type Target } from './fence-target.js'

/**
 * The proxy's own compare-and-raise, in the statement, for a fenced table whose fence trigger
 * is not known to be installed where the statement runs: a database not checked yet (after a
 * start or a reload), or not migrated since the table joined the config. Where the trigger is
 * there too, both check each row and agree.
 */
interface RowFence extends Target {
  /** The new value of the fence column of the row being updated (PF409 when stale). */
  advance: string
  /** True for a row that may be deleted (PF409 when stale). */
  admits: string
  /** The token a new row gets (0 when none is required and none is given). */
  inserted: string
}

function rowFence(t: Target, source: TokenSource): RowFence {
  const names = `${quoteLiteral(t.relation)}, ${quoteLiteral(t.table.column)}`
  const column = `${quoteIdent(t.range.alias?.aliasname ?? t.range.relname)}.${quoteIdent(t.table.column)}`
  const setting = quoteLiteral(source.setting)
  const call = (committed: string) =>
    `pgfence.advance_token(${committed}, ${source.commentToken}, ${setting}, ${t.table.requireToken}, ${names}, ${source.rejectUnissued})`
  return {
    ...t,
    advance: call(column),
    admits: `(${call(column)} IS NOT NULL OR ${column} IS NULL)`,
    inserted: `coalesce(${tokenCall(source, t.table.requireToken, names)}, 0)`,
  }
}

const setFenceColumn = (f: RowFence): Node => ({
  ResTarget: { name: f.table.column, val: expr(f.advance) },
})

export function rewriteUpdate(node: Node, t: Target, source: TokenSource): void {
  node.targetList.push(setFenceColumn(rowFence(t, source)))
}

/**
 * Raises PF409 for a row holding a higher token. A copy of the statement's own condition keeps
 * the gate from firing on rows the statement does not change, whichever order the planner
 * evaluates the quals in.
 */
export function rewriteDelete(node: Node, t: Target, source: TokenSource): void {
  const f = rowFence(t, source)
  const guard = node.whereClause
  let gate = expr(f.admits)
  if (guard !== undefined) {
    gate = expr(`CASE WHEN true THEN ${f.admits} ELSE true END`)
    gate.CaseExpr.args[0].CaseWhen.expr = structuredClone(guard)
  }
  node.whereClause = and(guard, gate)
}

/** pgfence adds the fence column to an insert, so it needs the statement's column list. */
function refuseWithoutColumnList(t: Target, shape: string, example: string): never {
  return refuse(
    t,
    `${shape} without a column list is not supported on a fenced table`,
    `pgfence adds column ${t.table.column} to inserts into ${t.relation} and needs the column list`,
    `name the columns: ${example}`,
  )
}

/** A fence column listed with DEFAULT in every row is left to pgfence: it is taken out. */
function dropDefaultFenceColumn(t: Target, cols: Node[] | undefined, rows: Node[] | undefined) {
  const index = cols?.findIndex((col: Node) => col.ResTarget?.name === t.table.column) ?? -1
  if (index < 0 || !allDefault(rows, index)) return
  cols!.splice(index, 1)
  for (const row of rows!) row.List.items.splice(index, 1)
}

const withFenceColumn = (t: Target, columns: Node[] | undefined): Node[] => [
  ...(columns ?? []),
  { ResTarget: { name: t.table.column } },
]

/** Adds one output column to every row a VALUES list or a (set-operation) SELECT produces. */
function appendOutputColumn(select: Node, value: Node): void {
  if (select.valuesLists) {
    for (const row of select.valuesLists) row.List.items.push(structuredClone(value))
  } else if (select.op && select.op !== 'SETOP_NONE') {
    appendOutputColumn(select.larg, value)
    appendOutputColumn(select.rarg, value)
  } else {
    select.targetList.push({ ResTarget: { val: structuredClone(value) } })
  }
}

export function rewriteInsert(node: Node, t: Target, source: TokenSource): void {
  const f = rowFence(t, source)
  const defaultValues = node.selectStmt === undefined
  if (!defaultValues && !node.cols?.length) {
    refuseWithoutColumnList(t, 'INSERT', 'INSERT INTO table (col, ...) VALUES ...')
  }
  dropDefaultFenceColumn(t, node.cols, node.selectStmt?.SelectStmt?.valuesLists)
  node.cols = withFenceColumn(t, node.cols)
  const value = expr(f.inserted)
  if (defaultValues) {
    node.selectStmt = {
      SelectStmt: { valuesLists: [{ List: { items: [value] } }], op: 'SETOP_NONE' },
    }
  } else appendOutputColumn(node.selectStmt.SelectStmt, value)
  const conflict = node.onConflictClause
  if (conflict?.action === 'ONCONFLICT_UPDATE') {
    conflict.targetList = conflict.targetList.filter((target: Node) => !isExcludedFence(t, target))
    conflict.targetList.push(setFenceColumn(f))
  }
}

export function rewriteMerge(node: Node, t: Target, source: TokenSource): void {
  const f = rowFence(t, source)
  for (const { MergeWhenClause: clause } of node.mergeWhenClauses as Node[]) {
    if (clause.commandType === 'CMD_UPDATE') clause.targetList.push(setFenceColumn(f))
    else if (clause.commandType === 'CMD_DELETE') {
      // MERGE conditions take no subqueries and no reordering worry: a CASE keeps the order.
      const gate = expr(f.admits)
      clause.condition =
        clause.condition === undefined
          ? gate
          : {
              CaseExpr: {
                args: [{ CaseWhen: { expr: clause.condition, result: gate } }],
                defresult: expr('false'),
              },
            }
    } else if (clause.commandType === 'CMD_INSERT') rewriteMergeInsert(f, clause)
  }
}

function rewriteMergeInsert(f: RowFence, clause: Node): void {
  const defaultValues = !clause.targetList?.length && !clause.values?.length
  if (!defaultValues && !clause.targetList?.length) {
    refuseWithoutColumnList(
      f,
      'MERGE ... INSERT',
      'WHEN NOT MATCHED THEN INSERT (col, ...) VALUES ...',
    )
  }
  if (clause.values?.length) {
    dropDefaultFenceColumn(f, clause.targetList, [{ List: { items: clause.values } }])
  }
  clause.targetList = withFenceColumn(f, clause.targetList)
  clause.values = [...(clause.values ?? []), expr(f.inserted)]
}
