import type { Config } from '../config/schema.js'
import { unreachable } from './upstream-connector.js'

/**
 * The deadline of one upstream login: the TCP connect, TLS, and the server's answers up to its
 * first ReadyForQuery must all fit in `upstream.connectTimeoutMs`, so that a server that accepts
 * and then says nothing fails the client with 08006 in time.
 */
export class UpstreamLogin {
  private readonly controller = new AbortController()
  private readonly timer: NodeJS.Timeout

  constructor(upstream: Config['upstream']) {
    // The error is made only when it is due: most logins never need it.
    const timedOut = () =>
      unreachable(
        upstream,
        `no answer to the login within ${upstream.connectTimeoutMs} ms (upstream.connectTimeoutMs)`,
      )
    this.timer = setTimeout(() => this.controller.abort(timedOut()), upstream.connectTimeoutMs)
  }

  /** Aborted, with the 08006 to send, once the login is out of time. */
  get deadline(): AbortSignal {
    return this.controller.signal
  }

  /** The login is over: the server's first ReadyForQuery passed, or the session ended. */
  done(): void {
    clearTimeout(this.timer)
  }
}
