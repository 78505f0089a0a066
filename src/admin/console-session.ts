import type { Config } from '../config/schema.js'
import type { Handshake } from '../client/startup-handshake.js'
import type { Logger } from '../log.js'
import { PgError } from '../wire/error-response.js'
import { loginThroughUpstream } from './console-login.js'
import { CONSOLE_DATABASE, serveConsole, type ConsoleCommands } from './console.js'

export { CONSOLE_DATABASE }

export interface ConsoleHooks {
  /** The console is open (login accepted). */
  onOpen(): void
  logger: Logger
}

/**
 * A client that asked for database pgfence: PostgreSQL checks its login (as it would for any
 * database), then a user of admin.users gets the console and anyone else 42501, as PostgreSQL
 * words a missing CONNECT privilege.
 */
export async function openConsole(
  upstream: Config['upstream'],
  handshake: Extract<Handshake, { kind: 'startup' }>,
  users: readonly string[],
  commands: ConsoleCommands,
  { onOpen, logger }: ConsoleHooks,
): Promise<void> {
  const { connection, packet, leftover } = handshake
  const user = packet.params.get('user')!
  const authenticated = await loginThroughUpstream(upstream, connection, packet.bytes, leftover)
  if (!authenticated) return void connection.socket.destroySoon()
  if (!users.includes(user)) {
    logger.info({ user }, 'admin console refused: user not in admin.users')
    throw new PgError(
      '42501',
      `permission denied for database "${CONSOLE_DATABASE}"`,
      'FATAL',
      'User is not listed in admin.users.',
    )
  }
  logger.info({ user }, 'admin console opened')
  onOpen()
  serveConsole(connection, commands, logger)
}
