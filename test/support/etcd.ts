import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import { freePort } from '../e2e/support/ports.js'

/** Whether an `etcd` binary is on PATH (Debian's etcd-server). */
export const etcdInstalled = (): boolean =>
  spawnSync('etcd', ['--version'], { stdio: 'ignore' }).status === 0

interface Member {
  name: string
  clientUrl: string
  peerUrl: string
  process: ChildProcess | null
}

/**
 * A throwaway etcd cluster of `size` members on free loopback ports, in a temp dir. Short
 * heartbeats (50 ms, election 500 ms) keep elections fast and etcd's minimum lease TTL at 1 s.
 */
export async function startEtcdCluster(size: number) {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-etcd-'))
  const members: Member[] = []
  for (let i = 0; i < size; i++) {
    const [client, peer] = [await freePort(), await freePort()]
    members.push({
      name: `m${i}`,
      clientUrl: `http://127.0.0.1:${client}`,
      peerUrl: `http://127.0.0.1:${peer}`,
      process: null,
    })
  }
  const initialCluster = members.map((m) => `${m.name}=${m.peerUrl}`).join(',')
  const launch = (member: Member) => {
    member.process = spawn(
      'etcd',
      [
        ...['--name', member.name, '--data-dir', join(dir, member.name)],
        ...['--listen-client-urls', member.clientUrl, '--advertise-client-urls', member.clientUrl],
        ...['--listen-peer-urls', member.peerUrl, '--initial-advertise-peer-urls', member.peerUrl],
        ...['--initial-cluster', initialCluster, '--initial-cluster-state', 'new'],
        ...['--initial-cluster-token', `pgfence-${process.pid}-${dir.slice(-6)}`],
        ...['--heartbeat-interval', '50', '--election-timeout', '500'],
        ...['--logger', 'zap', '--log-level', 'error'],
      ],
      { stdio: ['ignore', 'ignore', 'inherit'] },
    )
  }
  const stop = async (member: Member) => {
    const child = member.process
    member.process = null
    if (!child || child.exitCode !== null || child.signalCode !== null) return
    const exited = once(child, 'exit')
    child.kill('SIGKILL')
    await exited
  }
  members.forEach(launch)
  const cluster = {
    endpoints: members.map((m) => m.clientUrl),
    /** Kills member `i` at once, as a crash would. */
    stop: (i: number) => stop(members[i]!),
    /** The indexes of the members still running. */
    running: () => members.flatMap((m, i) => (m.process ? [i] : [])),
    /** The index of the member that is the Raft leader (and so holds the leases' expiry). */
    leader: async (): Promise<number> => {
      for (const [i, m] of members.entries()) {
        if (!m.process) continue
        const status = await memberStatus(m.clientUrl)
        if (status && status.header.member_id === status.leader) return i
      }
      throw new Error('no etcd member says it leads')
    },
    /** Resolves once the members that run agree on a leader (etcd's /health answers true). */
    healthy: (timeoutMs = 20_000) =>
      waitFor(async () => {
        const running = members.filter((m) => m.process)
        const answers = await Promise.all(running.map((m) => health(m.clientUrl)))
        return answers.every(Boolean)
      }, timeoutMs),
    remove: async () => {
      await Promise.all(members.map(stop))
      rmSync(dir, { recursive: true, force: true })
    },
  }
  try {
    await cluster.healthy()
  } catch (err) {
    await cluster.remove()
    throw err
  }
  return cluster
}

export type EtcdCluster = Awaited<ReturnType<typeof startEtcdCluster>>

/** etcd's own status through its JSON gateway: which member answered, and which leads. */
async function memberStatus(
  clientUrl: string,
): Promise<{ header: { member_id: string }; leader: string } | null> {
  try {
    const response = await fetch(`${clientUrl}/v3/maintenance/status`, {
      method: 'POST',
      body: '{}',
      signal: AbortSignal.timeout(1000),
    })
    return (await response.json()) as { header: { member_id: string }; leader: string }
  } catch {
    return null
  }
}

async function health(clientUrl: string): Promise<boolean> {
  try {
    const response = await fetch(`${clientUrl}/health`, { signal: AbortSignal.timeout(1000) })
    return ((await response.json()) as { health?: string }).health === 'true'
  } catch {
    return false
  }
}

async function waitFor(condition: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs
  while (!(await condition())) {
    if (Date.now() > until) throw new Error(`etcd not healthy within ${timeoutMs} ms`)
    await delay(50)
  }
}
