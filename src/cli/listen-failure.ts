import type { RunningProxy } from '../proxy/proxy-server.js'

/** An error from binding a listener, as Node reports it. */
type ListenError = NodeJS.ErrnoException & { address?: string; port?: number }

/** Why binding a listener failed, in one line naming the address; null for other errors. */
function listenFailure(err: ListenError): string | null {
  if (err.syscall !== 'listen') return null
  const where = err.port === undefined ? err.address : `${err.address}:${err.port}`
  const why = err.code === 'EADDRINUSE' ? 'already in use by another process' : err.message
  return `cannot listen on ${where}: ${why}`
}

/**
 * Starts the proxy for `pgfence <command>`; a listener that cannot bind is told on stderr in one
 * line naming the address, and gives null (the command exits 1). Other errors are thrown.
 */
export async function proxyOrListenFailure(
  command: string,
  start: () => Promise<RunningProxy>,
): Promise<RunningProxy | null> {
  try {
    return await start()
  } catch (err) {
    const reason = listenFailure(err as ListenError)
    if (reason === null) throw err
    process.stderr.write(`pgfence ${command}: ${reason}\n`)
    return null
  }
}
