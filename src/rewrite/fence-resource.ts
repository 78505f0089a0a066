import { parseSync } from 'libpg-query'
import { deparseSync } from 'pgsql-deparser'
import { and, expr, tokenCall, type Node } from './ast.js'
import type { FenceContext, PathStep } from './fence-context.js'
import { relationOf } from './fence-target.js'
import { Refusal } from './refusal.js'
import { quoteLiteral } from './sql-text.js'
import { matchTable, type RangeVar, type ResourceTable } from './tables.js'

/**
 * Resource fences: every write to a member table first calls `pgfence.enter_resource`, which
 * checks the presented token against the resource's fence, raises it, and keeps the fence row
 * locked until the transaction ends. The call is placed so that it runs before the first row is
 * written wherever the statement shape allows:
 *
 * - UPDATE / DELETE, INSERT ... SELECT and single-row INSERT ... VALUES: an uncorrelated
 *   `(SELECT pgfence.enter_resource(...))` in the WHERE clause, which PostgreSQL plans as a
 *   one-time filter evaluated before the scan starts.
 * - MERGE: the same sub-select in every action's condition, evaluated before the first action.
 * - COPY FROM: a call in the WHERE clause, per row, before each row is written.
 * - TRUNCATE: a DO block that enters the resource, then truncates (see truncateGate).
 * - Other INSERT shapes (multi-row VALUES, DEFAULT VALUES, DEFAULT items): a data-modifying
 *   CTE on the statement, which PostgreSQL runs exactly once, at the latest when the statement
 *   ends; a refusal still aborts the whole statement.
 */

/** Data-modifying gate CTEs to graft, by the statement that owns the WITH clause. */
export type ResourceGates = Map<Node, Node>

type Handler = (node: Node, ctx: FenceContext, path: PathStep[], gates: ResourceGates) => boolean

interface Member {
  table: ResourceTable
  /** The relation as the statement names it, quoted: resolved upstream only for error fields. */
  relation: string
  /** `relation` as a literal for the helpers. */
  rel: string
}

function memberOf(range: RangeVar | undefined, ctx: FenceContext): Member | undefined {
  const table = range && matchTable(ctx.resources, range)
  if (!table || !range) return undefined
  const relation = relationOf(range)
  // Resource fences always need a token (tokenCall below).
  ctx.writes.push({ relation, column: null, requireToken: true })
  return { table, relation, rel: quoteLiteral(relation) }
}

/** SQL text of the call that enters the member table's resource. */
function enterCall(member: Member, ctx: FenceContext): string {
  const { resource } = member.table
  const name =
    resource.kind === 'fixed'
      ? quoteLiteral(resource.name)
      : `pgfence.resource_name(${ctx.commentResource}, ${quoteLiteral(ctx.resourceSetting)}, ${member.rel})`
  const token = tokenCall(ctx, true, `${member.rel}, NULL`)
  return `pgfence.enter_resource(${name}, ${token}, ${member.rel})`
}

/** The call as an uncorrelated sub-select: evaluated once per statement. */
const oncePerStatement = (member: Member, ctx: FenceContext): Node =>
  expr(`(SELECT ${enterCall(member, ctx)})`)

function refuse(member: Member, message: string, detail: string, hint: string): never {
  throw new Refusal('PF501', message, detail, hint, member.relation)
}

function gateWhere(node: Node, ctx: FenceContext): boolean {
  const member = memberOf(node.relation, ctx)
  if (!member) return false
  if (node.whereClause?.CurrentOfExpr) {
    refuse(
      member,
      'WHERE CURRENT OF is not supported on a table fenced by a resource',
      'a cursor write admits no other condition, so the resource fence cannot be checked first',
      'write by key instead: ... WHERE <primary key> = ...',
    )
  }
  node.whereClause = and(oncePerStatement(member, ctx), node.whereClause)
  return true
}

function gateInsert(node: Node, ctx: FenceContext, path: PathStep[], gates: ResourceGates) {
  const member = memberOf(node.relation, ctx)
  if (!member) return false
  const select = node.selectStmt?.SelectStmt
  if (select && gateSelect(select, oncePerStatement(member, ctx))) return true
  gateByCte(member, ctx, path, gates)
  return true
}

/**
 * Puts the gate into the WHERE clause of the first SELECT an INSERT reads from; a single VALUES
 * row becomes a SELECT list, which PostgreSQL types the same way for INSERT. False when the
 * source is VALUES of another shape.
 */
function gateSelect(select: Node, gate: Node): boolean {
  if (select.op !== 'SETOP_NONE') return gateSelect(select.larg, gate)
  if (select.valuesLists) {
    const rows = select.valuesLists as Node[]
    const items: Node[] = rows[0].List.items
    if (rows.length !== 1 || items.some((item) => item.SetToDefault)) return false
    if (select.sortClause || select.limitCount || select.limitOffset) return false
    delete select.valuesLists
    select.targetList = items.map((val) => ({ ResTarget: { val } }))
  }
  select.whereClause = and(gate, select.whereClause)
  return true
}

/** The gate as a data-modifying CTE on the outermost statement around the write. */
function gateByCte(member: Member, ctx: FenceContext, path: PathStep[], gates: ResourceGates) {
  if (path.some((step) => step.key === 'RuleStmt')) {
    refuse(
      member,
      'this INSERT shape is not supported in a rule on a table fenced by a resource',
      'the resource fence of a multi-row VALUES or DEFAULT VALUES insert needs a WITH clause',
      'use INSERT ... SELECT, or a trigger instead of a rule',
    )
  }
  const owner = path.find((step) => statementKeys.has(step.key))!.node
  const gate = oncePerStatement(member, ctx)
  const existing = gates.get(owner)
  if (existing) {
    const remove = existing.CommonTableExpr.ctequery.DeleteStmt
    remove.whereClause = and(remove.whereClause, gate)
    return
  }
  const cte = parseSync(
    'WITH "_pgfence_gate" AS (DELETE FROM pgfence.gate_anchor WHERE true) SELECT',
  ).stmts[0].stmt.SelectStmt.withClause.ctes[0]
  cte.CommonTableExpr.ctequery.DeleteStmt.whereClause = gate
  gates.set(owner, cte)
}

const statementKeys = new Set(['InsertStmt', 'UpdateStmt', 'DeleteStmt', 'MergeStmt', 'SelectStmt'])

function gateMerge(node: Node, ctx: FenceContext): boolean {
  const member = memberOf(node.relation, ctx)
  if (!member) return false
  for (const { MergeWhenClause: clause } of node.mergeWhenClauses as Node[]) {
    if (clause.commandType === 'CMD_NOTHING') continue
    clause.condition = and(clause.condition, oncePerStatement(member, ctx))
  }
  return true
}

/** COPY FROM admits no sub-selects in its WHERE: the call runs before each row is written. */
function gateCopyFrom(node: Node, ctx: FenceContext): boolean {
  const member = node.is_from ? memberOf(node.relation, ctx) : undefined
  if (!member) return false
  node.whereClause = and(node.whereClause, expr(enterCall(member, ctx)))
  return true
}

function refuseRule(node: Node, ctx: FenceContext): boolean {
  const member = memberOf(node.relation, ctx)
  if (member) {
    refuse(
      member,
      'rules on a table fenced by a resource are not supported',
      'a rule could redirect writes around the resource fence',
      'use a trigger instead',
    )
  }
  return false
}

export const resourceHandlers: Record<string, Handler> = {
  UpdateStmt: gateWhere,
  DeleteStmt: gateWhere,
  InsertStmt: gateInsert,
  MergeStmt: gateMerge,
  CopyStmt: gateCopyFrom,
  RuleStmt: refuseRule,
}

/**
 * TRUNCATE of member tables becomes a DO block that enters each resource, then truncates: the
 * command tag becomes DO. The text holds the comment values as literals, so it is never cached
 * as a template. Null when the statement is not a TRUNCATE of a member table.
 */
export function truncateGate(stmt: Node, ctx: FenceContext): string | null {
  const relations: Node[] = stmt.TruncateStmt?.relations ?? []
  const members = relations
    .map(({ RangeVar: range }) => memberOf(range, ctx))
    .filter((member): member is Member => member !== undefined)
  if (members.length === 0) return null
  const calls = [...new Set(members.map((member) => `PERFORM ${enterCall(member, ctx)};`))]
  const body = `BEGIN ${calls.join(' ')} ${deparseSync(stmt, { pretty: false })}; END`
  let tag = '$pgfence$'
  while (body.includes(tag)) tag = `$pgfence${tag.length}$`
  return `DO ${tag} ${body} ${tag}`
}
