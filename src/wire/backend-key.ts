import { HEADER_BYTES } from './protocol.js'

/** The process id and secret key of a backend (BackendKeyData), which a CancelRequest names. */
export interface BackendKey {
  processId: number
  secretKey: number
}

/** The key at `pos` of a message: a BackendKeyData body, or a CancelRequest's last 8 bytes. */
export const readBackendKey = (bytes: Buffer, pos = HEADER_BYTES): BackendKey => ({
  processId: bytes.readUInt32BE(pos),
  secretKey: bytes.readUInt32BE(pos + 4),
})
