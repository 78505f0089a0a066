/**
 * The layout of a token of `pgfence.next_token()`: EPOCH_TAG + timeline × 2^40 + the sequence's
 * value (token-source.ts says why). Pure arithmetic, so the lease library can read a token's
 * timeline without loading the schema's SQL.
 */

/** Set in every token next_token() issues: the tokens that carry the timeline they were issued on. */
export const EPOCH_TAG = 2n ** 62n
/** The sequence's share of a token: its low 40 bits; the timeline sits above them. */
const SEQUENCE_BITS = 40n
export const SEQUENCE_SPAN = 2n ** SEQUENCE_BITS

/** The timeline a token of next_token() was issued on (null: a token from another issuer). */
export const tokenTimeline = (token: bigint): number | null =>
  token >= EPOCH_TAG ? Number((token - EPOCH_TAG) >> SEQUENCE_BITS) : null
