// A proxy's own CPU per login (pgfence's, or PgBouncer's beside it), the logins stopped at each
// stage of a pooled login, so that a login's cost can be split: `accept` (connect, then close),
// `startup` (the SSL refusal and the startup packet, up to the SASL request), `greeting` (SCRAM,
// the server connection lent and the greeting; the client then leaves without a goodbye),
// `query` (a whole login: the greeting, one query, Terminate). Logins run back to back unless
// GAP_MS sets a pause after each.
// Usage: node bench/login-stages.mjs PORT PROXY_PID STAGE [LOGINS] [CONCURRENT]
// (user postgres, password bench-secret or PGPASSWORD, database BENCH_DB or pgfence_compare_bench)
import { Buffer } from 'node:buffer'
import { readFileSync } from 'node:fs'
import net from 'node:net'
import { performance } from 'node:perf_hooks'
import process from 'node:process'
import { setTimeout as sleep } from 'node:timers/promises'
import { deriveKeys, ScramClientExchange } from '../dist/auth/scram.js'
import {
  query,
  saslInitialResponse,
  saslResponse,
  startupMessage,
  typedMessage,
} from '../dist/wire/messages.js'
import { AUTH_SASL, AUTH_SASL_CONTINUE, SSL_REQUEST_CODE } from '../dist/wire/protocol.js'

const [port, pid, stage, logins = '2000', concurrent = '4'] = process.argv.slice(2)
const password = process.env.PGPASSWORD ?? 'bench-secret'
const gapMs = Number(process.env.GAP_MS ?? 0)
const STARTUP = startupMessage([
  ['user', 'postgres'],
  ['database', process.env.BENCH_DB ?? 'pgfence_compare_bench'],
  ['application_name', 'login-stages'],
])
const SSL_REQUEST = Buffer.alloc(8)
SSL_REQUEST.writeInt32BE(8)
SSL_REQUEST.writeInt32BE(SSL_REQUEST_CODE, 4)
const TERMINATE = typedMessage(0x58) // X (Frontend.Terminate, a const enum)
let keys = null

/** utime and stime of the proxy so far, in clock ticks (USER_HZ: 100 on Linux). */
function cpuTicks() {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ')
  return [Number(fields[11]), Number(fields[12])]
}

/** One login, up to `stage`. */
function login() {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), '127.0.0.1')
    socket.setNoDelay(true)
    let pending = Buffer.alloc(0)
    let refused = false
    let queried = false
    let scram = null
    const leave = () => (socket.destroy(), resolve())
    const onMessage = (type, body) => {
      if (type === 'E') return reject(new Error(body.toString('utf8')))
      if (type === 'R' && body.readInt32BE(0) === AUTH_SASL) {
        if (stage === 'startup') return leave()
        scram = new ScramClientExchange((salt, n) => (keys ??= deriveKeys(password, salt, n)))
        socket.write(saslInitialResponse('SCRAM-SHA-256', scram.first()))
      } else if (type === 'R' && body.readInt32BE(0) === AUTH_SASL_CONTINUE) {
        socket.write(saslResponse(scram.final(body.toString('utf8', 4))))
      } else if (type === 'Z' && (stage === 'greeting' || queried)) {
        if (stage === 'greeting') return leave()
        socket.end(TERMINATE)
        socket.once('close', resolve)
      } else if (type === 'Z') {
        queried = true
        socket.write(query('SELECT 1'))
      }
    }
    socket.on('error', reject)
    socket.on('connect', () => (stage === 'accept' ? leave() : socket.write(SSL_REQUEST)))
    socket.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk])
      if (!refused) {
        refused = true
        pending = pending.subarray(1)
        socket.write(STARTUP)
      }
      while (pending.length >= 5 && pending.length >= pending.readInt32BE(1) + 1) {
        const end = pending.readInt32BE(1) + 1
        onMessage(String.fromCharCode(pending[0]), pending.subarray(5, end))
        pending = pending.subarray(end)
      }
    })
  })
}

async function client(count) {
  for (let i = 0; i < count; i++) {
    await login()
    if (gapMs > 0) await sleep(gapMs)
  }
}

const total = Number(logins)
const clients = Number(concurrent)
const run = (count) => Promise.all(Array.from({ length: clients }, () => client(count / clients)))
await run(clients * 50) // code that runs once per login is optimized only after some logins
const [user0, sys0] = cpuTicks()
const started = performance.now()
await run(total)
const [user1, sys1] = cpuTicks()
const perLogin = (ticks) => ((ticks * 10) / total).toFixed(3)
process.stdout.write(
  `${stage.padEnd(9)} ${total} logins, ${((total * 1000) / (performance.now() - started)).toFixed(0)}/s: ` +
    `proxy user ${perLogin(user1 - user0)} sys ${perLogin(sys1 - sys0)} ms per login\n`,
)
