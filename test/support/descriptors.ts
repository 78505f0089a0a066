import { readdirSync, readFileSync, readlinkSync } from 'node:fs'

/** A TCP connection as seen from one end: its local port, and its peer's port if given. */
export interface Ends {
  local: number
  remote?: number
}

const hexPort = (port: number) => `:${port.toString(16).toUpperCase().padStart(4, '0')}`

/**
 * This process's descriptors for the TCP sockets with these ends (a proxy started in the test's
 * own process): a descriptor that C duplicated counts apart from Node's, so a duplicate left open
 * shows here, as it would keep the connection open after Node's own close.
 */
export function descriptorsOf({ local, remote }: Ends): number {
  const inodes = new Set<string>()
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/)
      const matches =
        fields[1]?.endsWith(hexPort(local)) &&
        (remote === undefined || fields[2]?.endsWith(hexPort(remote)))
      if (matches) inodes.add(`socket:[${fields[9]}]`)
    }
  }
  let count = 0
  for (const fd of readdirSync('/proc/self/fd')) {
    try {
      if (inodes.has(readlinkSync(`/proc/self/fd/${fd}`))) count++
    } catch {
      // closed while listed
    }
  }
  return count
}
