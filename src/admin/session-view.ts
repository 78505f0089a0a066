import { clientState, type SessionRegistry } from '../session/session-registry.js'
import type { ConsoleTable } from './console.js'

/** SHOW CLIENTS: one row per session. */
export function clientRows(registry: SessionRegistry): ConsoleTable {
  return {
    columns: ['id', 'user', 'database', 'state', 'addr', 'connect_time', 'relay', 'transactions'],
    rows: [...registry.sessions].map(([session, entry]) => [
      entry.id,
      entry.user,
      entry.database,
      clientState(session),
      entry.peer(),
      entry.connectedAt.toISOString(),
      session.relayedNatively ? 'native' : 'node',
      session.state().transactions,
    ]),
  }
}

/** SHOW SERVERS: the server side of each session. */
export function serverRows(registry: SessionRegistry): ConsoleTable {
  return {
    columns: ['id', 'user', 'database', 'state', 'client_id', 'connect_time', 'host'],
    rows: [...registry.sessions].map(([session, entry]) => [
      entry.id,
      entry.user,
      entry.database,
      session.state().ready ? 'active' : 'login',
      entry.id,
      entry.connectedAt.toISOString(),
      entry.serverNode()?.name ?? null,
    ]),
  }
}
