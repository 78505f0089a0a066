import { execFileSync } from 'node:child_process'

/**
 * The keepalive timers (in seconds) that `ss` shows on this process's sockets matching `filter`;
 * null for a socket whose timer is the retransmission one (data not acknowledged yet).
 */
export function keepaliveTimers(filter: string): (number | null)[] {
  const out = execFileSync('ss', ['-tnoH', 'state', 'established', filter], { encoding: 'utf8' })
  return out
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const timer = /timer:\(keepalive,(?:(\d+)min)?(?:([\d.]+)sec)?(?:(\d+)ms)?/.exec(line)
      if (!timer) return null
      return Number(timer[1] ?? 0) * 60 + Number(timer[2] ?? 0) + Number(timer[3] ?? 0) / 1000
    })
}
