import type { ClientConnection } from '../client/client-connection.js'
import { MessageQueue, typedMessageLength } from '../wire/message-queue.js'
import { MAX_AUTH_MESSAGE } from '../wire/protocol.js'
import { authenticateClient, type UpstreamCredentials } from './client-authenticator.js'
import type { CredentialSource } from './credential-source.js'

/** A client pgfence has authenticated; its socket is paused. */
export interface AuthenticatedConnection {
  /** What pgfence may log in to PostgreSQL with on the client's behalf. */
  credentials: UpstreamCredentials
  /** The last authentication messages, AuthenticationOk included, for the caller to send. */
  answer: Buffer
  /** The client's bytes received after its last authentication message, so far. */
  readonly leftover: Buffer
}

/**
 * Authenticates a client on its connection with pgfence's own credentials: `user`'s secret from
 * `source` (looked up for `database`). A refused login rejects with the PgError to send.
 */
export async function authenticateConnection(
  connection: ClientConnection,
  user: string,
  database: string,
  source: CredentialSource,
): Promise<AuthenticatedConnection> {
  const queue = new MessageQueue(typedMessageLength(MAX_AUTH_MESSAGE))
  const socket = connection.socket
  const onClose = () => queue.fail(new Error('client closed the connection during authentication'))
  socket.on('close', onClose)
  connection.setReceiver((chunk) => (queue.push(chunk), true))
  socket.resume()
  try {
    const secret = await source.lookup(user, database)
    const conversation = {
      send: (bytes: Buffer) => void socket.write(bytes),
      next: () => queue.next(),
    }
    const { credentials, answer } = await authenticateClient(conversation, user, secret)
    socket.pause()
    return new Authenticated(credentials, answer, queue)
  } finally {
    socket.off('close', onClose)
  }
}

/** A class, not an object literal with a getter, which V8 makes a dictionary of at each login. */
class Authenticated implements AuthenticatedConnection {
  constructor(
    readonly credentials: UpstreamCredentials,
    readonly answer: Buffer,
    private readonly queue: MessageQueue,
  ) {}

  get leftover(): Buffer {
    return this.queue.leftover
  }
}
