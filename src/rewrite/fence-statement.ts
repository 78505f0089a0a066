import { and, expr, fenceCall, tokenCall, type Node, type TokenSource } from './ast.js'
import { resourceHandlers, type ResourceGates } from './fence-resource.js'
import { Refusal } from './refusal.js'
import { quoteIdent, quoteLiteral } from './sql-text.js'
import {
  matchIgnoringCase,
  matchTable,
  type FencedTable,
  type RangeVar,
  type ResourceTable,
  type UnresolvedName,
} from './tables.js'

export interface FenceContext extends TokenSource {
  tables: FencedTable[]
  resources: ResourceTable[]
  /** Configured names that resolve to no table in the session's database. */
  unresolved: UnresolvedName[]
  /** Name of the session setting that holds the resource name. */
  resourceSetting: string
  /** SQL text of the statement's comment resource name: NULL, a literal or a `$n` placeholder. */
  commentResource: string
}

/** One node on the way from the statement's root to a node, with the key it hangs under. */
export interface PathStep {
  key: string
  node: Node
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
  /** The new value of the fence column of the row being updated (PF409 when stale). */
  advance: string
  /** True for a row that may be deleted (PF409 when stale). */
  admits: string
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
  const gates: ResourceGates = new Map()
  visit(stmt, [], (key, node, path) => {
    if (handlers[key]?.(node, ctx)) changed = true
    if (resourceHandlers[key]?.(node, ctx, path, gates)) changed = true
  })
  // Grafted after the walk: the statements they go into are still being walked until then.
  for (const [statement, gate] of gates) {
    statement.withClause ??= { ctes: [] }
    statement.withClause.ctes.unshift(gate)
  }
  return changed
}

type OnNode = (key: string, node: Node, path: PathStep[]) => void

/** `path` holds the steps from the root to the node, the node's own step last (one shared stack). */
function visit(node: Node, path: PathStep[], onNode: OnNode): void {
  if (Array.isArray(node)) {
    for (const item of node) visit(item, path, onNode)
    return
  }
  if (node === null || typeof node !== 'object') return
  for (const [key, child] of Object.entries(node)) {
    if (child === null || typeof child !== 'object') continue
    if (Array.isArray(child)) {
      visit(child, path, onNode)
      continue
    }
    path.push({ key, node: child })
    // Children first: a write nested in a CTE is handled before its parent grafts new nodes.
    visit(child, path, onNode)
    onNode(key, child, path)
    path.pop()
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

const relationOf = (range: RangeVar): string =>
  [range.schemaname, range.relname]
    .filter((part): part is string => part !== undefined)
    .map(quoteIdent)
    .join('.')

function targetOf(range: RangeVar, ctx: FenceContext): Target | undefined {
  const table = matchTable(ctx.tables, range)
  if (!table) return refuseLookalike(range, ctx)
  const relation = relationOf(range)
  const names = `${quoteLiteral(relation)}, ${quoteLiteral(table.column)}`
  const column = `${quoteIdent(range.alias?.aliasname ?? range.relname)}.${quoteIdent(table.column)}`
  return {
    table,
    relation,
    column,
    token: tokenCall(ctx, table.requireToken, names),
    advance: fenceCall('advance_token', column, ctx, table.requireToken, names),
    admits: fenceCall('admits', column, ctx, table.requireToken, names),
    names,
  }
}

/**
 * A write to a table that a configured name, which resolves to nothing in this database, spells
 * ignoring letter case (most likely the table that was meant), or to a descendant of a fenced
 * table that lacks its fence triggers: it is not passed unfenced.
 */
function refuseLookalike(range: RangeVar, ctx: FenceContext): undefined {
  const name = matchIgnoringCase(ctx.unresolved, range)
  if (!name) return undefined
  const { message, detail, hint } = name.reason ?? {
    message: 'table is not fenced because its configured name does not match it',
    detail: `fenced table name ${JSON.stringify(name.text)} resolves to no table in this database; names are case-sensitive`,
    hint: `write the table's exact name in fencing.tables of the pgfence config and run pgfence migrate`,
  }
  throw new Refusal('PF501', message, detail, hint, relationOf(range))
}

const advance = (t: Target): Node => expr(t.advance)

/**
 * Raises PF409 for a row holding a higher token. `guard` (a copy of the statement's own
 * condition) keeps the gate from firing on rows the statement does not change, whichever order
 * the planner evaluates the quals in.
 */
function staleGate(t: Target, guard: Node | undefined): Node {
  if (guard === undefined) return expr(t.admits)
  const gate = expr(`CASE WHEN true THEN ${t.admits} ELSE true END`)
  gate.CaseExpr.args[0].CaseWhen.expr = structuredClone(guard)
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
  node.whereClause = and(node.whereClause, staleGate(t, node.whereClause))
  return true
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

const withFenceColumn = (t: Target, columns: Node[] | undefined): Node[] => [
  ...(columns ?? []),
  { ResTarget: { name: t.table.column } },
]

/** A new row's fence value: the presented token (0 when none is required and none is given). */
const insertedToken = (t: Target): Node => expr(`coalesce(${t.token}, 0)`)

function fenceInsert(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (!t) return false
  const defaultValues = node.selectStmt === undefined
  if (!defaultValues && !node.cols?.length) {
    refuseWithoutColumnList(t, 'INSERT', 'INSERT INTO table (col, ...) VALUES ...')
  }
  dropDefaultFenceColumn(t, node.cols, node.selectStmt?.SelectStmt?.valuesLists)
  refuseFenceColumnWrite(t, node.cols)
  node.cols = withFenceColumn(t, node.cols)
  const value = insertedToken(t)
  if (defaultValues)
    node.selectStmt = {
      SelectStmt: { valuesLists: [{ List: { items: [value] } }], op: 'SETOP_NONE' },
    }
  else appendOutputColumn(node.selectStmt.SelectStmt, value)
  const conflict = node.onConflictClause
  if (conflict?.action === 'ONCONFLICT_UPDATE') {
    conflict.targetList = conflict.targetList.filter((target: Node) => !isExcludedFence(t, target))
    refuseFenceColumnWrite(t, conflict.targetList)
    conflict.targetList.push(setFenceColumn(t))
  }
  return true
}

/**
 * ORMs that declare the fence column list it in every insert with the value DEFAULT: that
 * leaves it to pgfence, as if it were not listed. The column and its values are removed when
 * every row gives DEFAULT; any other value stays a write to the fence column (refused).
 */
function dropDefaultFenceColumn(t: Target, cols: Node[] | undefined, rows: Node[] | undefined) {
  const index = cols?.findIndex((col: Node) => col.ResTarget?.name === t.table.column) ?? -1
  if (index < 0 || !rows?.every((row: Node) => row.List.items[index]?.SetToDefault !== undefined))
    return
  cols!.splice(index, 1)
  for (const row of rows) row.List.items.splice(index, 1)
}

/** `fence = EXCLUDED.fence` in an upsert: the inserted value, which pgfence sets anyway. */
const isExcludedFence = (t: Target, target: Node): boolean => {
  const fields = target.ResTarget?.val?.ColumnRef?.fields as Node[] | undefined
  return (
    target.ResTarget?.name === t.table.column &&
    fields?.length === 2 &&
    fields[0].String?.sval === 'excluded' &&
    fields[1].String?.sval === t.table.column
  )
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
  return true
}

function fenceMergeInsert(t: Target, clause: Node): void {
  const defaultValues = !clause.targetList?.length && !clause.values?.length
  if (!defaultValues && !clause.targetList?.length) {
    refuseWithoutColumnList(
      t,
      'MERGE ... INSERT',
      'WHEN NOT MATCHED THEN INSERT (col, ...) VALUES ...',
    )
  }
  if (clause.values?.length) {
    const row = { List: { items: clause.values } }
    dropDefaultFenceColumn(t, clause.targetList, [row])
  }
  refuseFenceColumnWrite(t, clause.targetList)
  clause.targetList = withFenceColumn(t, clause.targetList)
  clause.values = [...(clause.values ?? []), insertedToken(t)]
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
  const mentions = (candidate: { name: string }) => lower.includes(candidate.name.toLowerCase())
  const table = ctx.tables.find(mentions) ?? ctx.resources.find(mentions)
  if (table) {
    throw new Refusal(
      'PF501',
      'DO blocks that mention a fenced table are not supported',
      `the block mentions fenced table ${table.name}; writes inside it cannot be fenced`,
      'run the writes as plain statements, which pgfence fences',
      null,
      'column' in table ? table.column : null,
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
