// What a login costs Node itself: a server on Node's net module that answers pgbench -S -C from
// memory, with no authentication (two round trips fewer than a SCRAM login), no server leg and
// no pooling. Its CPU per login is the floor under any login a Node proxy makes.
// Usage: node bench/login-floor.mjs PORT
import { Buffer } from 'node:buffer'
import net from 'node:net'
import process from 'node:process'
import {
  authentication,
  backendKeyData,
  commandComplete,
  dataRow,
  parameterStatuses,
  readyForQuery,
  rowDescription,
} from '../dist/wire/messages.js'

const SSL_REQUEST_CODE = 80877103
const QUERY = 0x51
const TERMINATE = 0x58

const greeting = Buffer.concat([
  authentication(0),
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

/** One connection: the startup packet (refusing TLS), then a Query answered per Query. */
function serve(socket) {
  let started = false
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
        socket.write(greeting)
      } else if (message[0] === QUERY) socket.write(message.includes('partstrat') ? tableInfo : row)
      else if (message[0] === TERMINATE) return void socket.end()
    }
  })
}

net.createServer({ noDelay: true }, serve).listen(Number(process.argv[2]), '127.0.0.1')
