import { isValidToken } from './comment-token.js'
import type { CommentMark } from './normalise.js'
import { Refusal } from './refusal.js'
import { quoteLiteral } from './sql-text.js'

/**
 * The words of PF428 and PF400 for a write's token. PostgreSQL raises them (the installed SQL has
 * them filled in, src/schema/refusal-literals.ts); `pgfence explain` and the proxy read them here.
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

/** A fenced write a statement makes: the token it needs, and where errors name it. */
export interface FencedWrite {
  relation: string
  column: string | null
  requireToken: boolean
}

/**
 * PF428 or PF400 for the writes of a statement, read as PostgreSQL reads the token when they
 * run: the comment token (through the statement marker), else the session's `setting`; none
 * when no write needs one.
 */
export function tokenRefusal(
  writes: readonly FencedWrite[],
  comment: CommentMark | undefined,
  session: string | undefined,
  fencing: { setting: string; commentKey: string },
): Refusal | null {
  const first = writes[0]
  if (first === undefined) return null
  const invalid = (token: string) =>
    new Refusal(
      'PF400',
      invalidTokenMessage,
      invalidTokenDetail(token),
      invalidTokenHint,
      first.relation,
      first.column,
    )
  if (comment?.token !== undefined) {
    return comment.tokenValid ? null : invalid(invalidCommentToken)
  }
  if (session === undefined || session === '') {
    const required = writes.find((write) => write.requireToken)
    if (!required) return null
    return new Refusal(
      'PF428',
      tokenRequiredMessage,
      tokenRequiredDetail(required.relation),
      proxyTokenHint(fencing),
      required.relation,
      required.column,
    )
  }
  return isValidToken(session) ? null : invalid(quoteLiteral(session))
}
