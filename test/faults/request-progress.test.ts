import { once } from 'node:events'
import net from 'node:net'
import { serialize } from 'pg-protocol'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cutError } from '../../src/session/cut-outcome.js'
import { nativeRelayModule, type NativeRelay } from '../../src/relay/native-relay.js'
import {
  carriedOf,
  RequestTracker,
  type CarriedProgress,
  type RequestProgress,
} from '../../src/relay/request-progress.js'
import { BackendScanner } from '../../src/wire/backend-scanner.js'
import { FROM_CLIENT, MessageFramer } from '../../src/wire/message-framer.js'
import { HEADER_BYTES } from '../../src/wire/protocol.js'
import { parse, query, sync, typed } from '../wire/frames.js'
import { relayedSockets, type RelayedSockets } from '../support/relayed-sockets.js'
import type { TransactionStatus } from '../../src/wire/protocol.js'

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

  it('takes a Terminate for no request: a session between transactions stays at rest', () => {
    const tracker = track([query('SELECT 1')], 'I')
    tracker.clientMessage(serialize.end(), 0, 5)
    expect(tracker.atRest).toBe(true)
    tracker.clientMessage(parse('s1', 'SELECT 1'), 0, parse('s1', 'SELECT 1').length)
    expect(tracker.atRest).toBe(false)
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
  const progress = (outstanding: number, status: TransactionStatus, mayCommit = false) => ({
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
  'a Terminate between transactions, and one after a Parse': [
    { client: [query('SELECT 1')] },
    { server: 'I' },
    { client: [serialize.end()] },
    { client: [parse('s1', 'SELECT 1'), serialize.end()] },
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
  /** Bytes each end has received so far, and what waits for more. */
  private readonly received = new Map<net.Socket, number>()
  private arrival: (() => void) | null = null

  private constructor(private readonly sockets: RelayedSockets) {
    for (const end of [sockets.client, sockets.server]) {
      this.received.set(end, 0)
      end.on('data', (chunk: Buffer) => {
        this.received.set(end, this.received.get(end)! + chunk.length)
        this.arrival?.()
      })
    }
  }

  get native(): NativeRelay {
    return this.sockets.native
  }

  static async open(listener: net.Server, from: CarriedProgress): Promise<RelayedPair> {
    return new RelayedPair(await relayedSockets(listener, {}, { progress: from }))
  }

  /**
   * Writes a chunk at one end and waits until the other end has received `passed` more bytes:
   * the relay has read the chunk (it holds back a header split across chunks until it is whole).
   */
  async carry(chunk: Buffer, toServer: boolean, passed = chunk.length): Promise<void> {
    const { client, server } = this.sockets
    const [from, to] = toServer ? [client, server] : [server, client]
    const target = this.received.get(to)! + passed
    const arrived = new Promise<void>((resolve) => {
      this.arrival = () => {
        if (this.received.get(to)! < target) return
        this.arrival = null
        resolve()
      }
    })
    from.write(chunk)
    await arrived
  }

  close(): void {
    this.sockets.close()
  }
}

/** The JavaScript relay's tracking, wired as a session wires it: its framer and scanner feed it. */
class JavaScriptTracking {
  readonly requests = new RequestTracker()
  private readonly framer = new MessageFramer(
    {
      forward: () => {},
      intercept: () => {},
      fail: (error) => {
        throw error
      },
      started: (bytes, pos, end) => this.requests.clientMessage(bytes, pos, end),
    },
    1 << 20,
    new Uint8Array(256),
    FROM_CLIENT,
  )
  private readonly scanner = new BackendScanner(
    () => undefined,
    (status) => this.requests.readyForQuery(status),
  )

  feed(chunk: Buffer, toServer: boolean): void {
    if (toServer) this.framer.push(chunk)
    else this.scanner.scan(chunk)
  }
}

function feed(tracker: RequestTracker, step: Step): void {
  if ('client' in step) {
    for (const message of step.client) tracker.clientMessage(message, 0, message.length)
  } else {
    tracker.readyForQuery(step.server.charCodeAt(0))
  }
}

/** A seeded pseudo-random source (mulberry32): the same sequences on every run. */
function randomSource(seed: number): (below: number) => number {
  let state = seed >>> 0
  return (below) => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return Math.floor((((t ^ (t >>> 14)) >>> 0) / 2 ** 32) * below)
  }
}

type Random = ReturnType<typeof randomSource>

/** How many random sessions the comparison plays (seeds 1 to this). */
const RANDOM_SESSIONS = 300

const pick = <T>(random: Random, items: readonly T[]): T => items[random(items.length)]!

/** Statement texts that do and do not say COMMIT or END as a word. */
const TEXTS = [
  'SELECT 1',
  'BEGIN',
  'COMMIT',
  'end',
  'UPDATE t SET a = 1; End;',
  "COMMIT PREPARED 'x'",
  'ROLLBACK',
  'SELECT committed FROM t',
  'SELECT weekend',
  'UPDATE t SET x_end = 1',
  "SELECT 'commit'",
  'SELECT $1::int AS commit$',
  'SELECT écommit, endé',
  'SELECT 1 -- end',
]
const STATEMENTS = ['', 's1', 'fin']

const clientMessages: ((random: Random) => Buffer)[] = [
  (random) => query(pick(random, TEXTS)),
  (random) => parse(pick(random, STATEMENTS), pick(random, TEXTS)),
  (random) => serialize.bind({ statement: pick(random, STATEMENTS) }),
  () => execute(),
  () => sync(),
  () => flush(),
  () => call(),
  (random) => serialize.copyData(Buffer.from(pick(random, TEXTS))),
  (random) => serialize.describe({ type: 'S', name: pick(random, STATEMENTS) }),
  () => serialize.end(),
]

/** Server messages besides ReadyForQuery: none of them is held back by either relay. */
const serverMessages: ((random: Random) => Buffer)[] = [
  () => typed('C', 'SELECT 1\0'),
  () => typed('D', Buffer.from([0, 1, 0, 0, 0, 2, 0x5a, 0x49])),
  () => typed('S', 'TimeZone\0UTC\0'),
]

/** Messages one end sends in a burst, whole. */
type Turn = { toServer: boolean; messages: Buffer[] }

/** Bytes one end writes at once, and how many of them the relay passes on. */
type Chunk = { chunk: Buffer; passed: number }

function randomTurn(random: Random, toServer: boolean): Turn {
  const messages: Buffer[] = []
  for (let n = 1 + random(5); n > 0; n--) {
    if (toServer) messages.push(pick(random, clientMessages)(random))
    else if (random(3) === 0) messages.push(pick(random, serverMessages)(random))
    else messages.push(readyForQuery(pick(random, ['I', 'T', 'E'])))
  }
  return { toServer, messages }
}

/** Where a stream stands at `at`: the bytes a relay has passed on, all but a header begun. */
function passedAt(starts: number[], at: number): number {
  const start = starts.findLast((s) => s <= at)!
  return at - start < HEADER_BYTES ? start : at
}

/**
 * The turn's bytes cut at random, anywhere (inside headers too), into chunks each of which the
 * relay passes something of on: so that the test knows when the relay has read it.
 */
function randomChunks(random: Random, { messages }: Turn): Chunk[] {
  const bytes = Buffer.concat(messages)
  const starts = messages.map((_, i) => Buffer.concat(messages.slice(0, i)).length)
  const cuts = Array.from({ length: random(4) }, () => 1 + random(bytes.length - 1))
  const chunks: Chunk[] = []
  let from = 0
  for (const cut of [...cuts.sort((a, b) => a - b), bytes.length]) {
    const passed = passedAt(starts, cut) - passedAt(starts, from)
    if (passed <= 0) continue
    chunks.push({ chunk: bytes.subarray(from, cut), passed })
    from = cut
  }
  return chunks
}

/** What both relays' tracking must agree on after each step: the carried fields and the count. */
interface Agreed {
  carried: CarriedProgress
  transactions: number
}

/**
 * A random session: turns of client and server messages cut into chunks; the JavaScript relay
 * carries it first, the native relay from turn `native.from`, JavaScript again from `native.to`.
 */
interface RandomSession {
  turns: { toServer: boolean; chunks: Chunk[] }[]
  native: { from: number; to: number }
}

function randomSession(seed: number): RandomSession {
  const random = randomSource(seed)
  const turns = Array.from({ length: 2 + random(10) }, (_, i) => {
    const turn = randomTurn(random, i % 2 === 0 || random(4) === 0)
    return { toServer: turn.toServer, chunks: randomChunks(random, turn) }
  })
  const from = random(turns.length)
  return { turns, native: { from, to: from + 1 + random(turns.length - from) } }
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
        if ('client' in step) await pair.carry(Buffer.concat(step.client), true)
        else await pair.carry(readyForQuery(step.server), false)
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

  /**
   * Each random session is followed whole by the JavaScript relay's tracking, and in three
   * parts by the relays taking it over from each other (JavaScript, native, JavaScript again, as
   * a kept connection's relay does): after every chunk, both must agree.
   */
  it('agrees with it on random sessions cut into random chunks, either relay taking over', async () => {
    for (let seed = 1; seed <= RANDOM_SESSIONS; seed++) {
      const { turns, native } = randomSession(seed)
      const whole = new JavaScriptTracking()
      const agreed = (tracking: JavaScriptTracking): Agreed => {
        const progress = tracking.requests.snapshot()
        return { carried: carriedOf(progress), transactions: progress.transactions }
      }
      const steps = turns.flatMap(({ toServer, chunks }, turn) =>
        chunks.map((chunk) => ({ turn, toServer, ...chunk })),
      )
      let pair: RelayedPair | null = null
      let resumed: JavaScriptTracking | null = null
      let earlier = 0 // transactions counted by the relays before the one carrying the session
      for (const [index, { turn, toServer, chunk, passed }] of steps.entries()) {
        const where = `seed ${seed}, chunk ${index} (turn ${turn}, native for turns ${native.from} to ${native.to})`
        if (turn === native.from && pair === null && resumed === null) {
          earlier = whole.requests.snapshot().transactions
          pair = await RelayedPair.open(listener, whole.requests.snapshot())
        }
        if (turn === native.to && pair !== null) {
          const progress = pair.native.progress()
          earlier += progress.transactions
          pair.close()
          pair = null
          resumed = new JavaScriptTracking()
          resumed.requests.resume(progress)
        }
        whole.feed(chunk, toServer)
        let seen: Agreed
        if (pair !== null) {
          await pair.carry(chunk, toServer, passed)
          const progress = pair.native.progress()
          seen = { carried: carriedOf(progress), transactions: progress.transactions }
        } else if (resumed !== null) {
          resumed.feed(chunk, toServer)
          seen = agreed(resumed)
        } else {
          continue
        }
        const expected = agreed(whole)
        expect(seen, where).toEqual({
          carried: expected.carried,
          transactions: expected.transactions - earlier,
        })
      }
      pair?.close()
    }
  })
})
