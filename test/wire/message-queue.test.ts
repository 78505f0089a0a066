import { describe, expect, it } from 'vitest'
import { MessageQueue, typedMessageLength } from '../../src/wire/message-queue.js'
import { query } from '../../src/wire/messages.js'

describe('MessageQueue.take', () => {
  it('takes whole messages as they are buffered, in order, and none before it is whole', async () => {
    const queue = new MessageQueue(typedMessageLength(1000))
    const first = query('SELECT 1')
    const second = query('SELECT 2')
    const both = Buffer.concat([first, second])
    queue.push(both.subarray(0, first.length + 3))
    expect(queue.take()).toEqual(first)
    expect(queue.take()).toBeNull()
    const waiting = queue.next()
    queue.push(both.subarray(first.length + 3))
    expect(await waiting).toEqual(second)
    expect(queue.take()).toBeNull()
  })

  it('copies: a reused chunk does not change what was taken', () => {
    const queue = new MessageQueue(typedMessageLength(1000))
    const chunk = query('SELECT 1')
    queue.push(chunk)
    chunk.fill(0)
    expect(queue.take()).toEqual(query('SELECT 1'))
  })

  it('leaves a bad length and a failure to next()', async () => {
    const queue = new MessageQueue(typedMessageLength(10))
    queue.push(query('SELECT 1234567890'))
    expect(queue.take()).toBeNull()
    await expect(queue.next()).rejects.toThrow('invalid message length')
    const failed = new MessageQueue(typedMessageLength(1000))
    failed.fail(new Error('gone'))
    expect(failed.take()).toBeNull()
    await expect(failed.next()).rejects.toThrow('gone')
  })
})
