import { quoteLiteral } from '../rewrite/sql-text.js'
import { refusalLiterals } from './refusal-literals.js'
import { sqlFile } from './sql-file.js'

/** Transaction-local: `xid token resource` of the last resource this transaction entered. */
export const enteredSetting = 'pgfence.entered_resource'

/** PF428's message for a write or a raise_fence without a resource name. */
const resourceRequiredMessage = 'fencing resource required'

/** Resource fences (sql/resource-fences.sql, which says how a fence is raised and held). */
export const resourceFencesSql = sqlFile('resource-fences', {
  ...refusalLiterals,
  entered_setting: quoteLiteral(enteredSetting),
  resource_required_message: quoteLiteral(resourceRequiredMessage),
})
