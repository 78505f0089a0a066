// The proxy's resident memory per idle client and across connect/disconnect cycles (run by
// bench/memory.sh). Clients are raw sockets doing a startup and a trust login, then idling.
// Usage: node bench/memory.mjs PROXY_PID PORT CLIENTS CYCLES
import { Buffer } from 'node:buffer'
import console from 'node:console'
import { readFileSync } from 'node:fs'
import net from 'node:net'
import process from 'node:process'
import { setTimeout as delay } from 'node:timers/promises'

const [pid, port, clients, cycles] = process.argv.slice(2).map(Number)
const OPENING_AT_ONCE = 25

/** The process's VmRSS in kB. */
function rssKb() {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)[1])
}

/** RSS once it has stopped moving (freed memory and closing sockets settle within a second). */
async function settledRssKb() {
  let last = rssKb()
  for (let i = 0; i < 50; i++) {
    await delay(100)
    const now = rssKb()
    if (Math.abs(now - last) <= 64) return now
    last = now
  }
  return last
}

function startupMessage() {
  const params = Buffer.from('user\0postgres\0database\0postgres\0\0')
  const message = Buffer.alloc(8 + params.length)
  message.writeInt32BE(message.length, 0)
  message.writeInt32BE(196608, 4)
  params.copy(message, 8)
  return message
}

/** A client logged in and idle: resolves with its socket at the server's first ReadyForQuery. */
function connectIdle() {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => socket.write(startupMessage()))
    let buffered = Buffer.alloc(0)
    const onData = (chunk) => {
      buffered = Buffer.concat([buffered, chunk])
      while (buffered.length >= 5 && buffered.length >= 1 + buffered.readInt32BE(1)) {
        const type = String.fromCharCode(buffered[0])
        if (type === 'E') return reject(new Error(`login failed: ${buffered.toString('latin1')}`))
        buffered = buffered.subarray(1 + buffered.readInt32BE(1))
        if (type === 'Z') {
          socket.off('data', onData)
          return resolve(socket)
        }
      }
    }
    socket.on('data', onData)
    socket.once('error', reject)
  })
}

/** Says goodbye (Terminate) and waits for the proxy to close the connection. */
function disconnect(socket) {
  return new Promise((resolve) => {
    socket.once('close', resolve)
    socket.end(Buffer.from([0x58, 0, 0, 0, 4]))
  })
}

async function openClients(count) {
  const sockets = []
  while (sockets.length < count) {
    const batch = Math.min(OPENING_AT_ONCE, count - sockets.length)
    sockets.push(...(await Promise.all(Array.from({ length: batch }, connectIdle))))
  }
  return sockets
}

const mb = (kb) => (kb / 1024).toFixed(1)

await Promise.all((await openClients(5)).map(disconnect))
const baseline = await settledRssKb()
console.log(`proxy RSS at rest: ${mb(baseline)} MB`)
let firstAfter = 0
for (let cycle = 1; cycle <= cycles; cycle++) {
  const before = await settledRssKb()
  const sockets = await openClients(clients)
  const connected = await settledRssKb()
  await Promise.all(sockets.map(disconnect))
  const after = await settledRssKb()
  if (cycle === 1) firstAfter = after
  const perClient = ((connected - before) * 1024) / clients / 1000
  console.log(
    `cycle ${cycle}: ${clients} idle clients ${mb(connected)} MB ` +
      `(${perClient.toFixed(1)} kB per client), after disconnect ${mb(after)} MB`,
  )
}
const last = await settledRssKb()
console.log(
  `RSS after cycle ${cycles} vs after cycle 1: ${((last / firstAfter - 1) * 100).toFixed(1)} %`,
)
