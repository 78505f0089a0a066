import { describe, expect, it } from 'vitest'
import { CancelKeys } from '../../src/pool/cancel-keys.js'
import { readBackendKey, type BackendKey } from '../../src/wire/backend-key.js'
import { cancelRequest } from '../../src/wire/messages.js'

describe('cancel keys of pooled clients', () => {
  const server: BackendKey = { processId: 4242, secretKey: 0xfedcba98 }

  it('send a client’s CancelRequest on to the server connection it holds', () => {
    const keys = new CancelKeys()
    let held: BackendKey | null = server
    const key = keys.issue(() => held)
    expect(key.processId).toBeLessThan(2 ** 31)
    const forwarded = keys.translate(cancelRequest(key))
    expect(forwarded).toEqual(cancelRequest(server))
    expect(readBackendKey(forwarded!, 8)).toEqual(server)
    held = null
    expect(keys.translate(cancelRequest(key))).toBeNull()
  })

  it('forget a client that left, and know no key they did not issue', () => {
    const keys = new CancelKeys()
    const key = keys.issue(() => server)
    keys.forget(key)
    expect(keys.translate(cancelRequest(key))).toBeNull()
    expect(keys.translate(cancelRequest({ processId: 1, secretKey: 2 }))).toBeNull()
  })

  it('send nothing for a client’s process id with another secret, nor forget the client', () => {
    const keys = new CancelKeys()
    const key = keys.issue(() => server)
    const guessed = { processId: key.processId, secretKey: (key.secretKey + 1) >>> 0 }
    expect(keys.translate(cancelRequest(guessed))).toBeNull()
    keys.forget(guessed)
    expect(keys.translate(cancelRequest(key))).toEqual(cancelRequest(server))
  })
})
