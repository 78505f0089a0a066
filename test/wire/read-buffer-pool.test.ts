import { expect, test } from 'vitest'
import { ReadBufferPool, returnReadBuffer } from '../../src/wire/read-buffer-pool.js'

test('a returned buffer is lent again instead of a new one', () => {
  const pool = new ReadBufferPool(1024, 2)
  const first = {}
  const buffer = pool.take()
  pool.lend(first, buffer)
  expect(buffer.length).toBe(1024)
  returnReadBuffer(first)
  expect(pool.take()).toBe(buffer)
})

test('a buffer comes back once, and only from a socket that borrowed one', () => {
  const pool = new ReadBufferPool(16, 4)
  const socket = {}
  const buffer = pool.take()
  pool.lend(socket, buffer)
  returnReadBuffer(socket)
  returnReadBuffer(socket)
  returnReadBuffer({})
  expect(pool.take()).toBe(buffer)
  expect(pool.take()).not.toBe(buffer)
})

test('keeps at most maxIdle buffers', () => {
  const pool = new ReadBufferPool(16, 1)
  const sockets = [{}, {}]
  const buffers = sockets.map((socket) => {
    const buffer = pool.take()
    pool.lend(socket, buffer)
    return buffer
  })
  sockets.forEach(returnReadBuffer)
  expect(pool.take()).toBe(buffers[0])
  expect(buffers).not.toContain(pool.take())
})
