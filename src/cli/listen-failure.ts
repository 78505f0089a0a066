/** An error from binding a listener, as Node reports it. */
export type ListenError = NodeJS.ErrnoException & { address?: string; port?: number }

/** Why binding a listener failed, in one line naming the address; null for other errors. */
export function listenFailure(err: ListenError): string | null {
  if (err.syscall !== 'listen') return null
  const where = err.port === undefined ? err.address : `${err.address}:${err.port}`
  const why = err.code === 'EADDRINUSE' ? 'already in use by another process' : err.message
  return `cannot listen on ${where}: ${why}`
}
