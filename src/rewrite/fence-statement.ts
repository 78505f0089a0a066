import type { Node } from './ast.js'
import type { FenceContext, PathStep } from './fence-context.js'
import { resourceHandlers, type ResourceGates } from './fence-resource.js'
import { rewriteDelete, rewriteInsert, rewriteMerge, rewriteUpdate } from './fence-rewrite.js'
import {
  allDefault,
  isExcludedFence,
  refuse,
  refuseFenceColumnWrite,
  relationOf,
  writesFenceColumn,
  type Target,
} from './fence-target.js'
import { Refusal } from './refusal.js'
import { truncateRefusal } from './refusal-texts.js'
import { qualifiedName } from './sql-text.js'
import { assignCommentToken } from './token-assignment.js'
import { matchIgnoringCase, matchTable, type RangeVar } from './tables.js'

/**
 * Fences every write in one statement's parse tree (CTEs, PREPARE, EXPLAIN, rules...), in place.
 * Row fences are the fence triggers' (see fence-triggers.ts): here their writes are checked for
 * what pgfence refuses, and an UPDATE with a comment token gets the fence column assignment
 * (ctx.assignments) for the trigger's cheapest check. Resource fences are gated in the statement.
 * Returns whether the tree changed otherwise (so must be deparsed); throws a Refusal for writes
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

/** Each checks a statement for what pgfence refuses; true when it also rewrote it. */
const handlers: Record<string, (node: Node, ctx: FenceContext) => boolean> = {
  UpdateStmt: checkUpdate,
  DeleteStmt: checkDelete,
  InsertStmt: checkInsert,
  MergeStmt: checkMerge,
  TruncateStmt: refuseTruncate,
  CopyStmt: refuseCopyFrom,
  DoStmt: refuseDoBlock,
  RuleStmt: refuseRule,
}

function targetOf(range: RangeVar, ctx: FenceContext): Target | undefined {
  const table = matchTable(ctx.tables, range)
  if (!table) return refuseLookalike(range, ctx)
  // A fenced parent is refused too while one of its children lacks the fence triggers.
  refuseLookalike(range, { unresolved: ctx.unresolved.filter((name) => name.reason) })
  const relation = relationOf(range)
  ctx.writes.push({ relation, column: table.column, requireToken: table.requireToken })
  return { table, relation, range, columnLeftToTrigger: ctx.maintenance && table.triggered }
}

/**
 * A write to a table that a configured name, which resolves to nothing in this database, spells
 * ignoring letter case (most likely the table that was meant), or to a descendant of a fenced
 * table that lacks its fence triggers: it is not passed unfenced.
 */
function refuseLookalike(range: RangeVar, ctx: Pick<FenceContext, 'unresolved'>): undefined {
  const name = matchIgnoringCase(ctx.unresolved, range)
  if (!name) return undefined
  const { message, detail, hint } = name.reason ?? {
    message: 'table is not fenced because its configured name does not match it',
    detail: `fenced table name ${JSON.stringify(name.text)} resolves to no table in this database; names are case-sensitive`,
    hint: `write the table's exact name in fencing.tables of the pgfence config and run pgfence migrate`,
  }
  throw new Refusal('PF501', message, detail, hint, relationOf(range))
}

function checkUpdate(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (!t) return false
  refuseFenceColumnWrite(t, node.targetList)
  if (!t.table.triggered) {
    rewriteUpdate(node, t, ctx)
    return true
  }
  // Left to the trigger under maintenance: the statement's own value is the one to write.
  if (writesFenceColumn(t, node.targetList)) return false
  const assignment = assignCommentToken(node, t, ctx)
  if (assignment) ctx.assignments.push(assignment)
  return false
}

/** Untriggered tables get the proxy's own compare-and-raise (fence-rewrite.ts). */
function rewritten(t: Target, rewrite: () => void): boolean {
  if (t.table.triggered) return false
  rewrite()
  return true
}

function checkDelete(node: Node, ctx: FenceContext): boolean {
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
  return rewritten(t, () => rewriteDelete(node, t, ctx))
}

/**
 * The fence column may be listed with the value DEFAULT in every row (ORMs that declare it do
 * so): that leaves it to pgfence. Any other value is refused.
 */
function refuseFenceColumnValues(t: Target, cols: Node[] | undefined, rows: Node[] | undefined) {
  const index = cols?.findIndex((col: Node) => col.ResTarget?.name === t.table.column) ?? -1
  if (index >= 0 && !allDefault(rows, index)) refuseFenceColumnWrite(t, cols)
}

/** Without a column list the values fill the table's columns in order; the trigger checks them. */
function checkInsert(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (!t) return false
  refuseFenceColumnValues(t, node.cols, node.selectStmt?.SelectStmt?.valuesLists)
  const conflict = node.onConflictClause
  if (conflict?.action === 'ONCONFLICT_UPDATE') {
    const targets = conflict.targetList.filter((target: Node) => !isExcludedFence(t, target))
    refuseFenceColumnWrite(t, targets)
  }
  return rewritten(t, () => rewriteInsert(node, t, ctx))
}

function checkMerge(node: Node, ctx: FenceContext): boolean {
  const t = targetOf(node.relation, ctx)
  if (!t) return false
  for (const { MergeWhenClause: clause } of node.mergeWhenClauses as Node[]) {
    if (clause.commandType === 'CMD_UPDATE') refuseFenceColumnWrite(t, clause.targetList)
    if (clause.commandType === 'CMD_INSERT') {
      const row = { List: { items: clause.values ?? [] } }
      refuseFenceColumnValues(t, clause.targetList, [row])
    }
  }
  return rewritten(t, () => rewriteMerge(node, t, ctx))
}

function refuseTruncate(node: Node, ctx: FenceContext): false {
  for (const { RangeVar: range } of node.relations as Node[]) {
    const t = targetOf(range, ctx)
    if (t) {
      const { message, detail, hint } = truncateRefusal
      refuse(t, message, detail(t.relation), hint)
    }
  }
  return false
}

function refuseCopyFrom(node: Node, ctx: FenceContext): false {
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

function refuseDoBlock(node: Node, ctx: FenceContext): false {
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
      qualifiedName(table.schema, table.name),
      'column' in table ? table.column : null,
    )
  }
  return false
}

function refuseRule(node: Node, ctx: FenceContext): false {
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
