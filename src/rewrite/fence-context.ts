import type { Node, TokenSource } from './ast.js'
import type { FencedTable, ResourceTable, UnresolvedName } from './tables.js'
import type { FencedWrite } from './token-refusals.js'
import type { TokenAssignment } from './token-assignment.js'

/** What fencing one statement works with, and what its walk fills in. */
export interface FenceContext extends TokenSource {
  tables: FencedTable[]
  resources: ResourceTable[]
  /** Configured names that resolve to no table in the session's database. */
  unresolved: UnresolvedName[]
  /** Name of the session setting that holds the resource name. */
  resourceSetting: string
  /** SQL text of the statement's comment resource name: NULL, a literal or a `$n` placeholder. */
  commentResource: string
  /** The statement's comment token is valid (1 to 18 digits). */
  commentTokenValid: boolean
  /** pgfence.maintenance may be on in the session (see Target.columnLeftToTrigger). */
  maintenance: boolean
  /** Filled by the walk: fence column assignments for the text (token-assignment.ts). */
  assignments: TokenAssignment[]
  /** Filled by the walk: the fenced tables and resource members the statement writes. */
  writes: FencedWrite[]
}

/** One node on the way from the statement's root to a node, with the key it hangs under. */
export interface PathStep {
  key: string
  node: Node
}
