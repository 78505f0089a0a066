import { AuthPhaseFilter } from '../wire/auth-filter.js'
import { query as queryMessage } from '../wire/messages.js'

/** A query the proxy runs on a session's own server connection before the client may start. */
export interface LoginQuery {
  sql: string
  /** The whole messages of the response, up to and without its ReadyForQuery. */
  done(messages: Buffer[]): void
}

/** The server's startup-phase bytes as the session reads them (AuthPhaseFilter's shape). */
export interface LoginPhase {
  push(chunk: Buffer): { forward: Buffer[]; rest: Buffer | null }
}

/**
 * Runs a login query between authentication and the client's first ReadyForQuery: the client
 * is shown nothing of it and waits one round trip. The query needs no credentials of the
 * proxy's own, and the client has sent nothing yet that it could be mixed up with.
 */
export function withLoginQuery(
  auth: AuthPhaseFilter,
  queryFor: (() => LoginQuery | null) | null,
  sendUpstream: (bytes: Buffer) => void,
): LoginPhase {
  if (queryFor === null) return auth
  let query: LoginQuery | null = null
  let held: Buffer[] | null = null
  const response = new AuthPhaseFilter(true)
  const collected: Buffer[] = []
  return {
    push(chunk) {
      if (held === null) {
        const { forward, rest } = auth.push(chunk)
        if (rest === null) return { forward, rest }
        // Asked only now: the client has authenticated to a database that exists.
        query = queryFor()
        if (query === null) return { forward, rest }
        // Copies: the chunk may be a view of a read buffer that is reused meanwhile.
        held = forward.map((message) => Buffer.from(message))
        sendUpstream(queryMessage(query.sql))
        chunk = rest
      }
      const { forward, rest } = response.push(chunk)
      collected.push(...forward.map((message) => Buffer.from(message)))
      if (rest === null) return { forward: [], rest: null }
      query!.done(collected.slice(0, -1))
      return { forward: held, rest }
    },
  }
}
