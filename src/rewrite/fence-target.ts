import { Refusal } from './refusal.js'
import { fenceColumnWrite } from './refusal-texts.js'
import { qualifiedName } from './sql-text.js'
import type { FencedTable, RangeVar } from './tables.js'
import type { Node } from './ast.js'

/** One fenced write target, as refusals name it. */
export interface Target {
  table: FencedTable
  /** The relation as the statement names it, quoted. */
  relation: string
  range: RangeVar
  /**
   * A write to its fence column goes to its fence trigger, which decides by PostgreSQL's own
   * maintenance rules (written for a superuser or a member of pgfence_maintenance, 42501 for
   * other roles, PF501 with maintenance off): the session may be under maintenance, and the
   * table has its trigger.
   */
  columnLeftToTrigger: boolean
}

export const relationOf = (range: RangeVar): string =>
  qualifiedName(range.schemaname, range.relname)

export const refuse = (t: Target, message: string, detail: string, hint: string): never => {
  throw new Refusal('PF501', message, detail, hint, t.relation, t.table.column)
}

/** Whether a SET or column list names the fence column. */
export const writesFenceColumn = (t: Target, targets: Node[] | undefined): boolean =>
  targets?.some((target: Node) => target.ResTarget?.name === t.table.column) ?? false

export function refuseFenceColumnWrite(t: Target, targets: Node[] | undefined): void {
  if (!t.columnLeftToTrigger && writesFenceColumn(t, targets)) {
    const { message, detail, hint } = fenceColumnWrite
    refuse(t, message, detail(t.table.column, t.relation), hint)
  }
}

/** `fence = EXCLUDED.fence` in an upsert: the inserted value, which pgfence sets anyway. */
export const isExcludedFence = (t: Target, target: Node): boolean => {
  const fields = target.ResTarget?.val?.ColumnRef?.fields as Node[] | undefined
  return (
    target.ResTarget?.name === t.table.column &&
    fields?.length === 2 &&
    fields[0].String?.sval === 'excluded' &&
    fields[1].String?.sval === t.table.column
  )
}

/** Whether every row gives the fence column (at `index` of the column list) the value DEFAULT. */
export const allDefault = (rows: Node[] | undefined, index: number): boolean =>
  rows?.every((row: Node) => row.List.items[index]?.SetToDefault !== undefined) ?? false
