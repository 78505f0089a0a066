import { parseSync } from 'libpg-query'
import { Refusal } from './refusal.js'
import { quoteIdent, quoteLiteral } from './sql-text.js'
import { matchTable, type FencedTable, type RangeVar } from './tables.js'

// Parse-tree nodes are plain JSON from the PostgreSQL parser.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Node = any

export interface FenceContext {
  tables: FencedTable[]
  /** Name of the session setting that holds the token. */
  setting: string
  /** SQL text of the statement's comment token: NULL, a string literal or a `$n` placeholder. */
  commentToken: string
}

/** One fenced write target: the SQL fragments its rewrite is made of. */
interface Target {
  table: FencedTable
  /** The relation as the statement names it, quoted: resolved upstream only for error fields. */
  relation: string
  /** The fence column qualified by the alias or table name. */
  column: string
  /** The token expression, evaluated at execution time. */
  token: string
  /** Trailing `rel, col` arguments of the helpers. */
  names: string
}

/**
 * Fences every write to a fenced table anywhere in one statement's parse tree (CTEs, PREPARE,
 * EXPLAIN, rules...), in place. Returns whether anything changed; throws a Refusal for writes
 * that cannot be fenced.
 */
export function fenceStatement(stmt: Node, ctx: FenceContext): boolean {
  let changed = false
  visit(stmt, (key, node) => {
    const handler = handlers[key]
    if (handler && handler(node, ctx)) changed = true
  })
  return changed
}

function visit(node: Node, onNode: (key: string, node: Node) => void): void {
  if (Array.isArray(node)) {
    for (const item of node) visit(item, onNode)
    return
  }
  if (node === null || typeof node !== 'object') return
  for (const [key, child] of Object.entries(node)) {
    // Children first: a write nested in a CTE is handled before its parent grafts new nodes.
    visit(child, onNode)
    if (child !== null && typeof child === 'object' && !Array.isArray(child)) onNode(key, child)
  }
}

const handlers: Record<string, (node: Node, ctx: FenceContext) => boolean> = {
  UpdateStmt: fenceUpdate,
  DeleteStmt: fenceDelete,
  InsertStmt: fenceInsert,
  MergeStmt: fenceMerge,
  TruncateStmt: refuseTruncate,
  CopyStmt: refuseCopyFrom,
  DoStmt: refuseDoBlock,
  RuleStmt: refuseRule,
}

function targetOf(range: RangeVar, ctx: FenceContext): Target | undefined {
  const table = matchTable(ctx.tables, range)
  if (!table) return undefined
  const relation = [range.schemaname, range.relname]
    .filter((part): part is string => part !== undefined)
    .map(quoteIdent)
    .join('.')
  const names = `${quoteLiteral(relation)}, ${quoteLiteral(table.column)}`
  return {
    table,
    relation,
    column: `${quoteIdent(range.alias?.aliasname ?? range.relname)}.${quoteIdent(table.column)}`,
    token: `pgfence.token(${ctx.commentToken}, ${quoteLiteral(ctx.setting)}, ${table.requireToken}, ${names})`,
    names,
  }
}

/** A parse tree for one SQL expression: templates are grafted rather than hand-built. */
function expr(sql: string): Node {
  return parseSync(`SELECT ${sql}`).stmts[0].stmt.SelectStmt.targetList[0].ResTarget.val
}

const and = (...args: Node[]): Node => {
  const present = args.filter((arg) => arg !== undefined)
  return present.length === 1 ? present[0] : { BoolExpr: { boolop: 'AND_EXPR', args: present } }
}

const checkToken = (t: Target): Node =>
  expr(t.token.replace('pgfence.token(', 'pgfence.check_token('))
const advance = (t: Target): Node => expr(`pgfence.advance(${t.column}, ${t.token}, ${t.names})`)

/**
 * Raises PF409 for a row holding a higher token. `guard` (a copy of the statement's own
 * condition) keeps the gate from firing on rows the statement does not change, whichever order
 * the planner evaluates the quals in.
 */
function staleGate(t: Target, guard: Node | undefined): Node {
  const gate = expr(
    `CASE WHEN true AND ${t.column} > ${t.token} ` +
      `THEN pgfence.stale(${t.column}, ${t.token}, ${t.names}) IS NULL ELSE true END`,
  )
  const when = gate.CaseExpr.args[0].CaseWhen
  when.expr =
    guard === undefined
      ? when.expr.BoolExpr.args[1]
      : and(structuredClone(guard), when.expr.BoolExpr.args[1])
  return gate
}

const refuse = (t: Target, message: string, detail: string, hint: string): never => {
  throw new Refusal('PF501', message, detail, hint, t.relation, t.table.column)
}

function refuseFenceColumnWrite(t: Target, targets: Node[] | undefined): void {
  if (targets?.some((target: Node) => target.ResTarget?.name === t.table.column)) {
    refuse(
      t,
      'the fence column of a fenced table cannot be written directly',
      `column ${t.table.column} of table ${t.relation} is maintained by pgfence`,
      'remove the fence column from the statement; pgfence sets it to the presented token',
    )
  }
}

const setFenceColumn = (t: Target): Node => ({
  ResTarget: { name: t.table.column, val: advance(t) },
})

function fenceUpdate(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (!t) return false
  refuseFenceColumnWrite(t, node.targetList)
  node.targetList.push(setFenceColumn(t))
  // WHERE CURRENT OF admits no other condition: the SET alone fences the row.
  if (!node.whereClause?.CurrentOfExpr) node.whereClause = and(checkToken(t), node.whereClause)
  return true
}

function fenceDelete(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (!t) return false
  if (node.whereClause?.CurrentOfExpr) {
    refuse(
      t,
      'DELETE ... WHERE CURRENT OF is not supported on a fenced table',
      `table ${t.relation} is fenced; a cursor delete cannot be checked against its token`,
      'delete by key instead: DELETE ... WHERE <primary key> = ...',
    )
  }
  node.whereClause = and(checkToken(t), node.whereClause, staleGate(t, node.whereClause))
  return true
}

function fenceInsert(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (!t) return false
  const defaultValues = node.selectStmt === undefined
  if (!defaultValues && !node.cols?.length) {
    refuse(
      t,
      'INSERT without a column list is not supported on a fenced table',
      `pgfence adds column ${t.table.column} to inserts into ${t.relation} and needs the column list`,
      'name the columns: INSERT INTO table (col, ...) VALUES ...',
    )
  }
  refuseFenceColumnWrite(t, node.cols)
  node.cols = [...(node.cols ?? []), { ResTarget: { name: t.table.column } }]
  const value = expr(`coalesce(${t.token}, 0)`)
  if (defaultValues)
    node.selectStmt = {
      SelectStmt: { valuesLists: [{ List: { items: [value] } }], op: 'SETOP_NONE' },
    }
  else appendOutputColumn(node.selectStmt.SelectStmt, value)
  const conflict = node.onConflictClause
  if (conflict?.action === 'ONCONFLICT_UPDATE') {
    refuseFenceColumnWrite(t, conflict.targetList)
    conflict.targetList.push(setFenceColumn(t))
  }
  return true
}

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

function fenceMerge(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (!t) return false
  for (const { MergeWhenClause: clause } of node.mergeWhenClauses as Node[]) {
    if (clause.commandType === 'CMD_UPDATE') {
      refuseFenceColumnWrite(t, clause.targetList)
      clause.targetList.push(setFenceColumn(t))
    } else if (clause.commandType === 'CMD_DELETE') {
      // MERGE conditions take no subqueries and no reordering worry: a CASE keeps the order.
      const gate = staleGate(t, undefined)
      clause.condition =
        clause.condition === undefined
          ? gate
          : {
              CaseExpr: {
                args: [{ CaseWhen: { expr: clause.condition, result: gate } }],
                defresult: expr('false'),
              },
            }
    } else if (clause.commandType === 'CMD_INSERT') {
      fenceMergeInsert(t, clause)
    }
  }
  node.joinCondition = and(checkToken(t), node.joinCondition)
  return true
}

function fenceMergeInsert(t: Target, clause: Node): void {
  const defaultValues = !clause.targetList?.length && !clause.values?.length
  if (!defaultValues && !clause.targetList?.length) {
    refuse(
      t,
      'MERGE ... INSERT without a column list is not supported on a fenced table',
      `pgfence adds column ${t.table.column} to inserts into ${t.relation} and needs the column list`,
      'name the columns: WHEN NOT MATCHED THEN INSERT (col, ...) VALUES ...',
    )
  }
  refuseFenceColumnWrite(t, clause.targetList)
  clause.targetList = [...(clause.targetList ?? []), { ResTarget: { name: t.table.column } }]
  clause.values = [...(clause.values ?? []), expr(`coalesce(${t.token}, 0)`)]
}

function refuseTruncate(node: Node, ctx: FenceContext): boolean {
  for (const { RangeVar: range } of node.relations as Node[]) {
    const t = targetOf(range, ctx)
    if (t) {
      refuse(
        t,
        'TRUNCATE is not supported on a fenced table',
        `table ${t.relation} is fenced; TRUNCATE removes rows without checking their tokens`,
        'use DELETE, which pgfence fences',
      )
    }
  }
  return false
}

function refuseCopyFrom(node: Node, ctx: FenceContext): boolean {
  const t = node.is_from && node.relation ? targetOf(node.relation, ctx) : undefined
  if (t) {
    refuse(
      t,
      'COPY FROM is not supported on a fenced table',
      `table ${t.relation} is fenced; COPY FROM writes rows without a fencing token`,
      'use INSERT, which pgfence fences',
    )
  }
  return false
}

function refuseDoBlock(node: Node, ctx: FenceContext): boolean {
  const body: string =
    (node.args as Node[]).find((arg) => arg.DefElem?.defname === 'as')?.DefElem.arg.String.sval ??
    ''
  const lower = body.toLowerCase()
  const table = ctx.tables.find((candidate) => lower.includes(candidate.name.toLowerCase()))
  if (table) {
    throw new Refusal(
      'PF501',
      'DO blocks that mention a fenced table are not supported',
      `the block mentions fenced table ${table.name}; writes inside it cannot be fenced`,
      'run the writes as plain statements, which pgfence fences',
      null,
      table.column,
    )
  }
  return false
}

function refuseRule(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (t) {
    refuse(
      t,
      'rules on a fenced table are not supported',
      `a rule on table ${t.relation} could redirect writes around the fence`,
      'use a trigger instead',
    )
  }
  return false
}
