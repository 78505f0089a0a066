import type { StatementRewriter } from '../rewrite/statement-rewriter.js'
import { nativeRelayModule, type NativeQueryCache, type NativeTemplate } from './native-relay.js'
import { encodingOf } from './statement-interceptor.js'

/**
 * The simple protocol's rewrite cache inside the native relay, so that a Query whose
 * literal-normalised text was seen before is rewritten in C without a call into JavaScript.
 * Null when there is no native relay or the rewriter cannot give templates.
 */
export function createNativeQueryCache(
  rewriter: StatementRewriter,
  capacity = 4096,
): NativeQueryCache | null {
  if (!nativeRelayModule || !rewriter.templateForQuery || !rewriter.commentKeys) return null
  return nativeRelayModule.createQueryCache(capacity, rewriter.commentKeys, (key) =>
    templateFor(rewriter, key),
  )
}

/** The template in the key's own encoding, so that the relay's byte splicing round-trips. */
function templateFor(rewriter: StatementRewriter, key: Buffer): NativeTemplate {
  const encoding = encodingOf(key)
  try {
    const template = rewriter.templateForQuery!(key.toString(encoding))
    if (!template) return template
    return {
      parts: template.parts.map((part) => Buffer.from(part, encoding)),
      holes: template.holes,
    }
  } catch {
    // rewriteQuery then meets the same text and reports what went wrong.
    return null
  }
}
