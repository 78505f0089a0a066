import { randomFillSync } from 'node:crypto'

/** How many random bytes one call into OpenSSL fetches. */
const BLOCK_BYTES = 4096

let block = Buffer.alloc(0)
let used = 0

/**
 * `length` cryptographically random bytes, copied out of a block filled at once: a login needs a
 * nonce and a cancel key, and one OpenSSL call per 4 kB costs less than one per value.
 */
export function randomBytes(length: number): Buffer {
  if (used + length > block.length) {
    block = randomFillSync(Buffer.allocUnsafe(Math.max(BLOCK_BYTES, length)))
    used = 0
  }
  const bytes = Buffer.allocUnsafe(length)
  block.copy(bytes, 0, used, used + length)
  block.fill(0, used, (used += length))
  return bytes
}
