import { quoteLiteral } from './sql-text.js'

/**
 * The words of PF428 and PF400 for a write's token. PostgreSQL raises them (pgfence.parse_token,
 * fence-helpers.ts, builds its text from these); `pgfence explain` and the proxy read them here.
 */
export const tokenRequiredMessage = 'fencing token required'
export const tokenRequiredDetail = (relation: string): string =>
  `no fencing token was presented for a write to table ${relation}`
export const invalidTokenMessage = 'invalid fencing token'
export const invalidTokenDetail = (token: string): string =>
  `fencing token ${token} is not an integer in [0, 9223372036854775807]`
/** How PF400's DETAIL names an invalid comment token (the statement marker carries only '-'). */
export const invalidCommentToken = "in the statement's comment"
export const invalidTokenHint = 'present the token exactly as the lock service issued it'

/**
 * PF428's HINT as the fence trigger gives it, on any connection: only the session setting reaches
 * the trigger without pgfence's statement marker. `literal`: the setting's name as a literal.
 */
export const directTokenHint = (setting: string, literal = quoteLiteral(setting)): string =>
  `SET ${setting} = N, or SELECT set_config(${literal}, 'N', false), with N the token of the lock you hold`

/** PF428's HINT through pgfence, which also reads the token from a comment. */
export const proxyTokenHint = (fencing: { setting: string; commentKey: string }): string =>
  `SET ${fencing.setting} = N, or put /* ${fencing.commentKey}=N */ in the statement, with N the token of the lock you hold`
