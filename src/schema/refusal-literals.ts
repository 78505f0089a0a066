import {
  fenceColumnWrite,
  staleFenceHint,
  staleTokenDetail,
  staleTokenHint,
  staleTokenMessage,
  truncateRefusal,
} from '../rewrite/refusal-texts.js'
import { quoteLiteral } from '../rewrite/sql-text.js'
import {
  directTokenHint,
  invalidCommentToken,
  invalidTokenDetail,
  invalidTokenHint,
  invalidTokenMessage,
  tokenRequiredDetail,
  tokenRequiredMessage,
} from '../rewrite/token-refusals.js'
import type { SqlValues } from './sql-file.js'

/**
 * The words the installed SQL refuses with, as literals for the `{{placeholders}}` of the SQL
 * files: the proxy's own refusals and PostgreSQL's say the same. Each `%s` and `%L` is filled by
 * the SQL's format() with what only PostgreSQL knows (tokens, relations, the setting).
 */
export const refusalLiterals: SqlValues = Object.fromEntries(
  Object.entries({
    token_required_message: tokenRequiredMessage,
    token_required_detail: tokenRequiredDetail('%s'),
    direct_token_hint: directTokenHint('%s', '%L'),
    invalid_token_message: invalidTokenMessage,
    invalid_token_detail: invalidTokenDetail('%s'),
    invalid_comment_token: invalidCommentToken,
    invalid_token_hint: invalidTokenHint,
    stale_token_message: staleTokenMessage,
    stale_token_detail: staleTokenDetail('%s', '%s', '%s'),
    stale_token_hint: staleTokenHint,
    stale_fence_hint: staleFenceHint,
    fence_column_write_message: fenceColumnWrite.message,
    fence_column_write_detail: fenceColumnWrite.detail('%s', '%s'),
    fence_column_write_hint: fenceColumnWrite.hint,
    truncate_message: truncateRefusal.message,
    truncate_detail: truncateRefusal.detail('%s'),
    truncate_hint: truncateRefusal.hint,
  }).map(([name, text]) => [name, quoteLiteral(text)]),
)
