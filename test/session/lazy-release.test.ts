import { describe, expect, test } from 'vitest'
import type { Pool } from '../../src/pool/pool.js'
import type { ServerConnection } from '../../src/pool/server-connection.js'
import type { KeptConnectionRelay } from '../../src/session/kept-connection-relay.js'
import { LazyRelease } from '../../src/session/lazy-release.js'

/** A session's side of lazy release, recorded: what the pool and the native relay were told. */
function setUp({ spare = true, nativeRelay = true, relayIdle = true } = {}) {
  const server = { name: 'server' } as unknown as ServerConnection
  const calls: string[] = []
  const state = { holding: true, atRest: false, relayActive: false }
  let giveBack: (() => void) | null = null
  const pool = {
    hasSpare: () => spare,
    keep: (connection: ServerConnection, callback: () => void) => {
      expect(connection).toBe(server)
      giveBack = callback
      calls.push('keep')
    },
    unkeep: () => void calls.push('unkeep'),
  } as unknown as Pool
  const relay = {
    get active() {
      return state.relayActive
    },
    relay: () => {
      state.relayActive = true
      calls.push('relay')
    },
    closeWhenIdle: () => {
      calls.push('closeWhenIdle')
      return relayIdle
    },
    takeBack: () => {
      state.relayActive = false
      calls.push('takeBack')
      return true
    },
  } as unknown as KeptConnectionRelay
  const lazy = new LazyRelease({
    pool,
    nativeRelay,
    relay,
    holding: () => state.holding,
    server: () => server,
    atRest: () => state.atRest,
    release: () => {
      calls.push('release')
      lazy.released(server)
    },
  })
  return { lazy, calls, state, giveBack: () => giveBack!() }
}

/** After the callbacks already queued with setImmediate (relayKept among them). */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))

describe('LazyRelease', () => {
  test('keeps the connection while the pool has one to spare, relayed natively from the second time at rest', async () => {
    const { lazy, calls, state } = setUp()
    state.atRest = true
    lazy.transactionEnded(true)
    await nextTurn()
    // Kept once: the JavaScript relay carries it (a session may end after one transaction).
    expect(calls).toEqual(['keep'])
    lazy.transactionEnded(true)
    expect(calls).toEqual(['keep', 'keep'])
    await nextTurn()
    expect(calls).toEqual(['keep', 'keep', 'relay'])
  })

  test('leaves a connection not at rest to the JavaScript relay', async () => {
    const { lazy, calls } = setUp()
    lazy.transactionEnded(true)
    lazy.transactionEnded(true)
    await nextTurn()
    expect(calls).toEqual(['keep', 'keep'])
  })

  test('gives the connection back at once under contention, without the native relay, or when it may not keep it', () => {
    for (const [options, mayKeep] of [
      [{ spare: false }, true],
      [{ nativeRelay: false }, true],
      [{}, false],
    ] as const) {
      const { lazy, calls } = setUp(options)
      lazy.transactionEnded(mayKeep)
      expect(calls).toEqual(['release', 'unkeep'])
    }
  })

  test('a waiting client gets the kept connection at once, relayed in JavaScript or natively and idle', async () => {
    const first = setUp()
    first.state.atRest = true
    first.lazy.transactionEnded(true)
    first.giveBack()
    expect(first.calls).toEqual(['keep', 'release', 'unkeep'])

    const { lazy, calls, state, giveBack } = setUp()
    state.atRest = true
    lazy.transactionEnded(true)
    lazy.transactionEnded(true)
    await nextTurn()
    giveBack()
    expect(calls).toEqual([
      'keep',
      'keep',
      'relay',
      'closeWhenIdle',
      'takeBack',
      'release',
      'unkeep',
    ])
  })

  test('a waiting client gets it at the end of the open transaction, and the next one is not kept', () => {
    const { lazy, calls, giveBack } = setUp({ relayIdle: false })
    lazy.transactionEnded(true)
    giveBack()
    // Relayed in JavaScript and not at rest: the next transaction's end gives it back.
    expect(calls).toEqual(['keep'])
    lazy.transactionEnded(true)
    expect(calls).toEqual(['keep', 'release', 'unkeep'])
    // Given back: the next connection may be kept again.
    lazy.transactionEnded(true)
    expect(calls.at(-1)).toBe('keep')
  })

  test('settings changed natively: the native relay stops when idle and the connection goes back', () => {
    const { lazy, calls } = setUp({ relayIdle: false })
    lazy.giveBackAtEnd()
    expect(calls).toEqual(['closeWhenIdle'])
    lazy.idle()
    expect(calls).toEqual(['closeWhenIdle', 'takeBack', 'release', 'unkeep'])
  })

  test('a giveback after the session stopped holding the connection does nothing', () => {
    const { lazy, calls, state, giveBack } = setUp()
    lazy.transactionEnded(true)
    state.holding = false
    giveBack()
    expect(calls).toEqual(['keep'])
  })
})
