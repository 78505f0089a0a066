import type { StartupHandshake } from '../client/startup-handshake.js'
import type { LevelLogger } from '../log.js'
import { PgError } from '../wire/error-response.js'
import type { ConsoleLogin } from './console-login.js'
import { CONSOLE_DATABASE, serveConsole, type ConsoleCommands } from './console.js'

export { CONSOLE_DATABASE }
export { consoleLogin } from './console-login.js'

export interface ConsoleHooks {
  /** The console is open (login accepted). */
  onOpen(): void
  logger: LevelLogger
}

/**
 * A client that asked for database pgfence: `login` checks it (as a login to any other database
 * would be checked), then a user of admin.users gets the console and anyone else 42501, as
 * PostgreSQL words a missing CONNECT privilege.
 */
export async function openConsole(
  login: ConsoleLogin,
  handshake: StartupHandshake,
  users: readonly string[],
  commands: ConsoleCommands,
  { onOpen, logger }: ConsoleHooks,
): Promise<void> {
  const { connection, packet } = handshake
  const user = packet.params.get('user')!
  if (!(await login(handshake))) return void connection.socket.destroySoon()
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
