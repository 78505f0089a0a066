import type net from 'node:net'
import type pg from 'pg'
import { backendMessages, type BackendMessage } from '../e2e/support/wire.js'

export interface RawClient {
  send(...pieces: Buffer[]): Promise<void>
  /** The messages up to and including the `count`-th ReadyForQuery from now. */
  replies(count: number): Promise<BackendMessage[]>
  /** The next `count` messages, whatever their types. */
  messages(count: number): Promise<BackendMessage[]>
  end(): Promise<void>
}

/** A client logged in through a pool (SCRAM, by node-postgres), then driven with raw bytes. */
export function rawClientOf(client: pg.Client): RawClient {
  const stream = (client as unknown as { connection: { stream: net.Socket } }).connection.stream
  stream.removeAllListeners('data')
  let received = Buffer.alloc(0)
  let onData: (() => void) | null = null
  let onClose: (() => void) | null = null
  stream.on('data', (chunk: Buffer) => {
    received = Buffer.concat([received, chunk])
    onData?.()
  })
  stream.once('close', () => onClose?.())
  /** The messages up to the one `last` picks (its index), once it has come. */
  const take = (last: (messages: BackendMessage[]) => number): BackendMessage[] | null => {
    const messages = backendMessages(received)
    const end = last(messages)
    if (end < 0) return null
    const taken = messages.slice(0, end + 1)
    const bytes = taken.reduce((sum, message) => sum + 5 + message.body.length, 0)
    received = received.subarray(bytes)
    return taken
  }
  const awaiting = (last: (messages: BackendMessage[]) => number) =>
    new Promise<BackendMessage[]>((resolve, reject) => {
      onClose = () => reject(new Error('the proxy closed the connection'))
      onData = () => {
        const taken = take(last)
        if (taken) resolve(taken)
      }
      onData()
    })
  return {
    async send(...pieces) {
      for (const piece of pieces) await new Promise((done) => stream.write(piece, done))
    },
    replies: (count) =>
      awaiting((messages) => {
        let seen = 0
        return messages.findIndex((message) => message.type === 'Z' && ++seen === count)
      }),
    messages: (count) => awaiting((messages) => (messages.length >= count ? count - 1 : -1)),
    end: () => client.end(),
  }
}
