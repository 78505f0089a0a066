/** What a server link (src/native/server-link.c) tells JavaScript, kept between sessions. */
export const enum LinkEvent {
  /** The reset came back clean: the connection may serve the next client. */
  Reset = 1,
  /** The reset failed (an error, a transaction left open, the server gone): the link is closed. */
  Failed = 2,
  /** The server closed, or sent something, while the connection waited: the link is closed. */
  Ended = 3,
}
