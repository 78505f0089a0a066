import { once } from 'node:events'
import net from 'node:net'
import { serialize } from 'pg-protocol'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cutError } from '../../src/session/cut-outcome.js'
import { nativeRelayModule, relaySession, type NativeRelay } from '../../src/relay/native-relay.js'
import {
  carriedOf,
  RequestTracker,
  type RequestProgress,
} from '../../src/relay/request-progress.js'
import { parse, query, sync, typed } from '../wire/frames.js'

const bind = (statement: string) =>
  typed('B', Buffer.from(`\0${statement}\0\0\0\0\0\0\0`, 'latin1'))

/** Feeds whole client messages, then the server's ReadyForQuery statuses. */
function track(messages: Buffer[], statuses = ''): RequestTracker {
  const tracker = new RequestTracker()
  for (const message of messages) tracker.clientMessage(message, 0, message.length)
  for (const status of statuses) tracker.readyForQuery(status.charCodeAt(0))
  return tracker
}

describe('RequestTracker', () => {
  it('counts Query and Sync until their ReadyForQuery, and keeps the last status', () => {
    const tracker = track([query('BEGIN'), parse('', 'SELECT 1'), sync(), query('SELECT 2')], 'T')
    expect(tracker.snapshot()).toMatchObject({ outstanding: 2, status: 'T', mayCommit: false })
    tracker.readyForQuery('T'.charCodeAt(0))
    tracker.readyForQuery('I'.charCodeAt(0))
    expect(tracker.snapshot()).toMatchObject({ outstanding: 0, status: 'I' })
  })

  it('counts a FunctionCall as a request', () => {
    const call = typed('F', Buffer.alloc(12))
    expect(track([call]).snapshot().outstanding).toBe(1)
    expect(track([call], 'I').snapshot().outstanding).toBe(0)
  })

  it('sees COMMIT and END as words, in any case, in Query and Parse', () => {
    for (const text of ['commit', "COMMIT PREPARED 'x'", 'UPDATE t SET a = 1; End', 'end;'])
      expect(track([query(text)]).snapshot().mayCommit).toBe(true)
    expect(track([parse('', 'COMMIT'), sync()]).snapshot().mayCommit).toBe(true)
    for (const text of ['SELECT committed FROM t', 'SELECT weekend', 'UPDATE t SET x_end = 1'])
      expect(track([query(text)]).snapshot().mayCommit).toBe(false)
  })

  it('counts any Bind as a possible COMMIT once a named statement may be one', () => {
    const tracker = track([parse('done', 'COMMIT'), sync()], 'T')
    expect(tracker.snapshot().mayCommit).toBe(false)
    tracker.clientMessage(bind('other'), 0, bind('other').length)
    expect(tracker.snapshot().mayCommit).toBe(true)
  })

  it('takes a message it cannot see whole for a possible COMMIT', () => {
    const tracker = new RequestTracker()
    const message = query('SELECT 1')
    tracker.clientMessage(message, 0, 7)
    expect(tracker.snapshot()).toMatchObject({ outstanding: 1, mayCommit: true })
  })
})

describe('cutError', () => {
  const progress = (outstanding: number, status: string, mayCommit = false) => ({
    outstanding,
    status,
    mayCommit,
    namedCommit: false,
    unsynced: outstanding > 0,
    quietMs: 0,
    transactions: 0,
  })

  it('says 08007 whenever a statement that may commit is in flight', () => {
    for (const reason of ['shutdown', 'queryTimeout', 'upstreamLost'] as const) {
      expect(cutError(reason, progress(1, 'I')).code).toBe('08007')
      expect(cutError(reason, progress(1, 'T', true)).code).toBe('08007')
    }
  })

  it('says what PostgreSQL would when nothing can have committed', () => {
    expect(cutError('shutdown', progress(0, 'T')).code).toBe('57P01')
    expect(cutError('shutdown', progress(1, 'T')).code).toBe('57P01')
    expect(cutError('queryTimeout', progress(1, 'E')).code).toBe('57014')
    expect(cutError('idleTransactionTimeout', progress(0, 'T')).code).toBe('25P03')
    expect(cutError('upstreamLost', progress(0, 'I')).code).toBe('08006')
    expect(cutError('shutdown', null).code).toBe('57P01')
  })
})

/** One step of a session: client messages, or the server's ReadyForQuery statuses. */
type Step = { client: Buffer[] } | { server: string }

const readyForQuery = (status: string) => typed('Z', status)
const execute = () => serialize.execute({})
const flush = () => serialize.flush()
const call = () => typed('F', Buffer.alloc(12))

/** Message sequences where the trackers' state moves: named COMMITs, batches, Flush, failures. */
const sequences: Record<string, Step[]> = {
  'simple queries and a transaction': [
    { client: [query('BEGIN')] },
    { server: 'T' },
    { client: [query('UPDATE t SET a = 1')] },
    { server: 'T' },
    { client: [query('COMMIT')] },
  ],
  'a named COMMIT prepared, then bound in a later transaction': [
    { client: [parse('fin', 'COMMIT'), sync()] },
    { server: 'I' },
    { client: [query('BEGIN')] },
    { server: 'T' },
    { client: [bind('fin'), execute(), sync()] },
  ],
  'an unnamed COMMIT': [
    { client: [query('BEGIN')] },
    { server: 'T' },
    { client: [parse('', 'commit'), bind(''), execute(), sync()] },
  ],
  'Parse and Flush without Sync': [{ client: [parse('s1', 'SELECT 1'), flush()] }],
  'a pipeline answered in part': [
    { client: [query('SELECT 1'), query('BEGIN'), query('SELECT weekend')] },
    { server: 'I' },
    { server: 'T' },
  ],
  'a failed transaction and a FunctionCall': [
    { client: [query('BEGIN')] },
    { server: 'T' },
    { client: [query('SELECT 1/0')] },
    { server: 'E' },
    { client: [call()] },
  ],
}

/**
 * A native relay between two loopback connections that the test plays both ends of: what the
 * "client" writes, the relay carries to the "server" and the other way round, following the
 * session's requests in C (session-progress.c).
 */
class RelayedPair {
  private constructor(
    readonly native: NativeRelay,
    private readonly client: net.Socket,
    private readonly server: net.Socket,
    /** The relay's own two sockets. */
    private readonly relayed: net.Socket[],
  ) {}

  static async open(listener: net.Server, from: RequestProgress): Promise<RelayedPair> {
    const { port } = listener.address() as net.AddressInfo
    const accept = async (): Promise<[net.Socket, net.Socket]> => {
      const accepted = once(listener, 'connection') as Promise<[net.Socket]>
      const outer = net.connect(port, '127.0.0.1')
      await once(outer, 'connect')
      return [outer, (await accepted)[0]]
    }
    const [client, clientSide] = await accept()
    const [serverSide, server] = await accept()
    const native = relaySession(clientSide, serverSide, {
      maxMessageBytes: 1 << 20,
      interceptTypes: '',
      progress: from,
      onMessage: () => undefined,
      onServerMessage: () => undefined,
      onClose: () => {},
    })
    if (!native) throw new Error('the native relay did not take the sockets')
    return new RelayedPair(native, client, server, [clientSide, serverSide])
  }

  /** Writes at one end and waits until the other end has it all: the relay has seen it. */
  async carry(messages: Buffer[], toServer: boolean): Promise<void> {
    const [from, to] = toServer ? [this.client, this.server] : [this.server, this.client]
    const bytes = Buffer.concat(messages)
    let received = 0
    const arrived = new Promise<void>((resolve) => {
      const onData = (chunk: Buffer) => {
        received += chunk.length
        if (received < bytes.length) return
        to.off('data', onData)
        resolve()
      }
      to.on('data', onData)
    })
    from.write(bytes)
    await arrived
  }

  close(): void {
    this.native.stop()
    for (const socket of [this.client, this.server, ...this.relayed]) socket.destroy()
  }
}

function feed(tracker: RequestTracker, step: Step): void {
  if ('client' in step) {
    for (const message of step.client) tracker.clientMessage(message, 0, message.length)
  } else {
    tracker.readyForQuery(step.server.charCodeAt(0))
  }
}

describe('the native relay follows requests as RequestTracker does', () => {
  let listener: net.Server

  beforeAll(async () => {
    expect(nativeRelayModule).not.toBeNull()
    listener = net.createServer().listen(0, '127.0.0.1')
    await once(listener, 'listening')
  })

  afterAll(() => new Promise((resolve) => listener?.close(resolve)))

  async function relayed(steps: Step[], from: RequestProgress): Promise<RequestProgress[]> {
    const pair = await RelayedPair.open(listener, from)
    try {
      const seen: RequestProgress[] = []
      for (const step of steps) {
        if ('client' in step) await pair.carry(step.client, true)
        else await pair.carry([readyForQuery(step.server)], false)
        seen.push(pair.native.progress())
      }
      return seen
    } finally {
      pair.close()
    }
  }

  it.each(Object.entries(sequences))('%s: the same state after each step', async (_, steps) => {
    const tracker = new RequestTracker()
    const expected = steps.map((step) => (feed(tracker, step), carriedOf(tracker.snapshot())))
    const native = await relayed(steps, new RequestTracker().snapshot())
    expect(native.map(carriedOf)).toEqual(expected)
  })

  it.each(Object.entries(sequences).filter(([, steps]) => steps.length > 1))(
    '%s: taken over at any step, either relay goes on where the other stopped',
    async (_, steps) => {
      for (let at = 1; at < steps.length; at++) {
        const whole = new RequestTracker()
        const expected = steps.map((step) => (feed(whole, step), carriedOf(whole.snapshot())))
        // JavaScript first, then the native relay from where it stood.
        const before = new RequestTracker()
        for (const step of steps.slice(0, at)) feed(before, step)
        const native = await relayed(steps.slice(at), before.snapshot())
        expect(native.map(carriedOf)).toEqual(expected.slice(at))
        // And back: JavaScript resumes from the native relay's state.
        const resumed = new RequestTracker()
        resumed.resume(native.at(-1)!)
        expect(carriedOf(resumed.snapshot())).toEqual(expected.at(-1))
      }
    },
  )

  it('a named COMMIT prepared before the native relay took over makes its Bind a possible commit', async () => {
    const before = new RequestTracker()
    feed(before, { client: [parse('fin', 'COMMIT'), sync()] })
    feed(before, { server: 'I' })
    const [, inFlight] = await relayed(
      [{ client: [query('BEGIN')] }, { server: 'T' }, { client: [bind('fin'), execute(), sync()] }],
      before.snapshot(),
    ).then((seen) => [seen[1], seen[2]])
    expect(inFlight).toMatchObject({ outstanding: 1, status: 'T', mayCommit: true })
    expect(cutError('queryTimeout', inFlight!).code).toBe('08007')
  })
})
