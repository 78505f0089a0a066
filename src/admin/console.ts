import type { ClientConnection } from '../client/client-connection.js'
import type { LevelLogger } from '../log.js'
import {
  backendKeyData,
  commandComplete,
  dataRow,
  emptyQueryResponse,
  parameterStatus,
  readyForQuery,
  rowDescription,
} from '../wire/messages.js'
import { PgError } from '../wire/error-response.js'
import { FROM_CLIENT, MessageFramer } from '../wire/message-framer.js'
import { FRONTEND_TYPES, Frontend } from '../wire/protocol.js'

/** The database name that reaches the admin console instead of the upstream. */
export const CONSOLE_DATABASE = 'pgfence'

/** Console statements are short; anything longer is refused by the framer. */
const MAX_CONSOLE_MESSAGE = 64 * 1024

export type ConsoleValue = string | number | boolean | null

export interface ConsoleTable {
  columns: readonly string[]
  rows: readonly (readonly ConsoleValue[])[]
}

export const SHOW_SUBJECTS = ['clients', 'servers', 'pools', 'stats', 'fencing', 'config'] as const
export type ShowSubject = (typeof SHOW_SUBJECTS)[number]

/** What the console shows and does, provided by the proxy. */
export interface ConsoleCommands {
  show(subject: ShowSubject): Promise<ConsoleTable>
  /** Re-reads the config file; rejects with the reason when the new config is refused. */
  reload(): Promise<void>
}

/** Parameters psql and drivers expect after a login. */
const SERVER_PARAMETERS: [string, string][] = [
  ['server_version', '15.0 (pgfence admin console)'],
  ['server_encoding', 'UTF8'],
  ['client_encoding', 'UTF8'],
  ['DateStyle', 'ISO, MDY'],
  ['integer_datetimes', 'on'],
  ['standard_conforming_strings', 'on'],
]

/**
 * The admin console on an authenticated client connection: the simple query protocol only,
 * answered by pgfence itself (no upstream). Extended-protocol messages get an error, then
 * ReadyForQuery at their Sync.
 */
export function serveConsole(
  connection: ClientConnection,
  commands: ConsoleCommands,
  logger: LevelLogger,
): void {
  const socket = connection.socket
  let extendedRefused = false
  let queue = Promise.resolve()
  const framer = new MessageFramer(
    {
      forward: () => {},
      intercept: (message) => {
        // Answers go out in the order the statements came, each after the previous one.
        const copy = Buffer.from(message)
        queue = queue.then(() => onMessage(copy))
      },
      fail: (error) => socket.end(error.encode()),
    },
    MAX_CONSOLE_MESSAGE,
    FRONTEND_TYPES,
    FROM_CLIENT,
  )
  const onMessage = async (message: Buffer): Promise<void> => {
    const type = message[0]
    if (type === Frontend.Terminate) return void socket.end()
    if (type === Frontend.Query) {
      const sql = message.toString('utf8', 5, message.length - 1)
      socket.write(Buffer.concat([await runStatement(sql, commands, logger), readyForQuery()]))
    } else if (type === Frontend.Sync) {
      extendedRefused = false
      socket.write(readyForQuery())
    } else if (!extendedRefused) {
      extendedRefused = true
      socket.write(
        new PgError(
          '0A000',
          'the pgfence admin console speaks the simple query protocol only',
          'ERROR',
        ).encode(),
      )
    }
  }
  connection.setReceiver((chunk) => {
    framer.push(chunk)
    return true
  })
  socket.write(
    Buffer.concat([
      ...SERVER_PARAMETERS.map(([name, value]) => parameterStatus(name, value)),
      backendKeyData({ processId: 0, secretKey: 0 }),
      readyForQuery(),
    ]),
  )
  socket.resume()
}

/** One console statement: its rows and command tag, or an ErrorResponse. */
async function runStatement(
  sql: string,
  commands: ConsoleCommands,
  logger: LevelLogger,
): Promise<Buffer> {
  const words = sql.trim().replace(/;\s*$/, '').trim().toLowerCase().split(/\s+/)
  if (words[0] === '') return emptyQueryResponse()
  try {
    if (words.length === 1 && words[0] === 'reload') {
      await commands.reload()
      return commandComplete('RELOAD')
    }
    const subject = words[1] as ShowSubject
    if (words.length === 2 && words[0] === 'show' && SHOW_SUBJECTS.includes(subject)) {
      return encodeTable(await commands.show(subject), 'SHOW')
    }
  } catch (err) {
    logger.warn({ err: (err as Error).message }, 'admin console command failed')
    return new PgError('55000', (err as Error).message, 'ERROR').encode()
  }
  return new PgError(
    '42601',
    `unrecognized admin console command: ${sql.trim()}`,
    'ERROR',
    undefined,
    `the console knows ${SHOW_SUBJECTS.map((s) => `SHOW ${s.toUpperCase()}`).join(', ')} and RELOAD`,
  ).encode()
}

function encodeTable(table: ConsoleTable, tag: string): Buffer {
  const text = (value: ConsoleValue) => (value === null ? null : String(value))
  return Buffer.concat([
    rowDescription(table.columns),
    ...table.rows.map((row) => dataRow(row.map(text))),
    commandComplete(tag),
  ])
}
