// What a login costs Node itself: a server on Node's net module that answers pgbench -S -C from
// memory, with no server leg and no pooling. Its CPU per login is the floor under any login a
// Node proxy makes. Given a SCRAM secret (as PostgreSQL stores it), it authenticates each client
// with it as a pooler does (pgfence's SCRAM exchange: 20 µs of arithmetic), so that the client's
// own key derivation runs between logins as it does for the proxies beside it; without one, it
// trusts (two round trips fewer).
// With `c` after the secret it is the floor of a login in C instead: the client is an accepted
// handle with no Node socket, pgfence's login in C (src/native/client-login.c) reads the startup
// packet and runs the SCRAM exchange, and JavaScript is called once, to write the greeting and
// close: for bench/login-stages.mjs's `greeting` stage only (no query is answered).
// Usage: node bench/login-floor.mjs PORT [SECRET [c]]
import { Buffer } from 'node:buffer'
import { once } from 'node:events'
import net from 'node:net'
import process from 'node:process'
import {
  authentication,
  authenticationSasl,
  backendKeyData,
  commandComplete,
  dataRow,
  parameterStatuses,
  readyForQuery,
  rowDescription,
} from '../dist/wire/messages.js'
import { AUTH_OK, AUTH_SASL_CONTINUE, AUTH_SASL_FINAL } from '../dist/wire/protocol.js'
import { parseVerifier, ScramServerExchange } from '../dist/auth/scram.js'

const SSL_REQUEST_CODE = 80877103
const QUERY = 0x51
const TERMINATE = 0x58
const PASSWORD = 0x70

const verifier = process.argv[3] ? parseVerifier(process.argv[3]) : null
if (process.argv[3] && !verifier) throw new Error('not a SCRAM secret')
const greeting = Buffer.concat([
  authentication(AUTH_OK),
  parameterStatuses([
    ['server_version', '15.0'],
    ['client_encoding', 'UTF8'],
    ['DateStyle', 'ISO, MDY'],
    ['integer_datetimes', 'on'],
    ['standard_conforming_strings', 'on'],
  ]),
  backendKeyData({ processId: 1, secretKey: 1 }),
  readyForQuery(),
])
const answer = (columns, values) =>
  Buffer.concat([
    rowDescription(columns),
    dataRow(values),
    commandComplete('SELECT 1'),
    readyForQuery(),
  ])
const row = answer(['abalance'], ['1'])
// pgbench's look at pgbench_accounts before it starts: a table, not partitioned.
const tableInfo = answer(['n', 'partstrat', 'count'], ['1', null, '0'])

/** The SASL request, then the answer to each SASL message (null: a wrong password). */
function scram() {
  const exchange = new ScramServerExchange(verifier)
  let first = true
  return {
    request: authenticationSasl(['SCRAM-SHA-256']),
    answer(message) {
      if (first) {
        first = false
        // SASLInitialResponse: the mechanism's name, the length of the data, the data.
        const data = message.subarray(message.indexOf(0, 5) + 5).toString()
        return authentication(AUTH_SASL_CONTINUE, Buffer.from(exchange.start(data)))
      }
      const final = exchange.finish(message.subarray(5).toString())
      if (!final) return null
      return Buffer.concat([
        authentication(AUTH_SASL_FINAL, Buffer.from(final.serverFinal)),
        greeting,
      ])
    },
  }
}

/**
 * One connection: the startup packet (refusing TLS), the SCRAM exchange when there is a secret,
 * then a Query answered per Query.
 */
function serve(socket) {
  let started = false
  const login = verifier ? scram() : null
  let pending = Buffer.alloc(0)
  socket.on('error', () => {})
  socket.on('data', (chunk) => {
    pending = pending.length > 0 ? Buffer.concat([pending, chunk]) : chunk
    while (pending.length >= 5) {
      const length = started ? pending.readUInt32BE(1) + 1 : pending.readUInt32BE(0)
      if (pending.length < length) return
      const message = pending.subarray(0, length)
      pending = pending.subarray(length)
      if (!started && message.readUInt32BE(4) === SSL_REQUEST_CODE) socket.write('N')
      else if (!started) {
        started = true
        socket.write(login ? login.request : greeting)
      } else if (message[0] === PASSWORD && login) {
        const answer = login.answer(message)
        if (!answer) return void socket.destroy()
        socket.write(answer)
      } else if (message[0] === QUERY) socket.write(message.includes('partstrat') ? tableInfo : row)
      else if (message[0] === TERMINATE) return void socket.end()
    }
  })
}

/** Logins in C, each greeted and closed by JavaScript. */
async function serveLoginsInC(server) {
  const { acceptClients } = await import('../dist/client/client-connection.js')
  const { NativeLogins } = await import('../dist/auth/native-login.js')
  const { decodeStartupPacket } = await import('../dist/wire/startup-packet.js')
  const refuseTls = Buffer.from('N')
  const logins = new NativeLogins(authenticationSasl(['SCRAM-SHA-256']), (packet) => {
    const kind = decodeStartupPacket(packet).kind
    return kind === 'ssl' ? refuseTls : kind === 'startup' ? verifier : null
  })
  const greet = async (connection) => {
    const result = await logins.login(connection)
    if ('serverFinal' in result)
      connection.write(
        Buffer.concat([authentication(AUTH_SASL_FINAL, Buffer.from(result.serverFinal)), greeting]),
      )
    connection.destroy()
  }
  acceptClients(server, true, (connection) => void greet(connection), true)
}

const server = net.createServer({ noDelay: true })
server.listen(Number(process.argv[2]), '127.0.0.1')
if (process.argv[4] === 'c') {
  if (!verifier) throw new Error('the login in C needs a SCRAM secret')
  await once(server, 'listening') // the listener's handle exists from then on
  await serveLoginsInC(server)
} else server.on('connection', serve)
