import { spawn, type ChildProcess } from 'node:child_process'
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
} from 'node:fs'
import { writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import pg from 'pg'
import { stringify } from 'yaml'
import { childEnv, pgBin } from '../e2e/support/commands.js'
import { freePort } from '../e2e/support/ports.js'
import { waitFor } from '../e2e/support/wait.js'
import { giveToClusterOwner } from './auth-cluster.js'
import { startEtcdCluster } from './etcd.js'

/**
 * Patroni's shortest timings that keep its rule loop_wait + 2 × retry_timeout ≤ ttl: the leader
 * key of a dead primary expires after `ttl` seconds, so a failover takes about that long.
 */
export const patroniTimings = { ttl: 6, loop_wait: 1, retry_timeout: 2 } as const

/** One PostgreSQL node run by its own Patroni. */
export interface PatroniNode {
  name: string
  port: number
  /** `127.0.0.1:port`, as upstream.hosts lists it. */
  hostPort: string
  /** Superuser URL straight to the node. */
  url: string
  /** Patroni's REST API, as upstream.patroni lists it. */
  restUrl: string
}

interface NodeState extends PatroniNode {
  dataDir: string
  configFile: string
  logFile: string
  /** The `runuser … patroni` process while this node's Patroni runs. */
  patroni: ChildProcess | null
}

const runningAsRoot = process.getuid?.() === 0

/** The pids of the processes below `pid` (from /proc), deepest last. */
function descendants(pid: number): number[] {
  const children = new Map<number, number[]>()
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)])
    } catch {
      // The process ended while /proc was read.
    }
  }
  const found: number[] = []
  const visit = (parent: number) => {
    for (const child of children.get(parent) ?? []) {
      found.push(child)
      visit(child)
    }
  }
  visit(pid)
  return found
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

const signal = (pids: number[], name: NodeJS.Signals) => {
  for (const pid of pids) {
    try {
      process.kill(pid, name)
    } catch {
      // Already gone.
    }
  }
}

/** The postmaster of a data directory and every process below it (none when it is down). */
function postmasterTree(dataDir: string): number[] {
  let pid: number
  try {
    pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
  } catch {
    return []
  }
  if (!(pid > 0) || !alive(pid)) return []
  return [pid, ...descendants(pid)]
}

/** This node's Patroni (runuser and below it); its postmaster runs in a session of its own. */
const patroniTree = (node: NodeState): number[] =>
  node.patroni?.pid ? [node.patroni.pid, ...descendants(node.patroni.pid)] : []

/** Kills a node's Patroni and PostgreSQL at once, as a crash of its machine would. */
function killNodeNow(node: NodeState): number[] {
  const pids = [...patroniTree(node), ...postmasterTree(node.dataDir)]
  signal(pids, 'SIGKILL')
  node.patroni = null
  return pids
}

/** Every cluster still running, killed at the latest when the test process exits. */
const running = new Set<NodeState[]>()
process.once('exit', () => {
  for (const nodes of running) for (const node of nodes) killNodeNow(node)
})

function patroniConfig(
  node: NodeState,
  scope: string,
  etcd: string,
  dir: string,
  restPort: number,
): Record<string, unknown> {
  const archive = join(dir, 'archive')
  return {
    scope,
    namespace: '/pgfence-test/',
    name: node.name,
    log: { level: 'INFO' },
    restapi: { listen: `127.0.0.1:${restPort}`, connect_address: `127.0.0.1:${restPort}` },
    etcd3: { hosts: etcd.replace(/^http:\/\//, '') },
    bootstrap: {
      dcs: {
        ...patroniTimings,
        maximum_lag_on_failover: 1048576,
        synchronous_mode: false,
        postgresql: {
          use_pg_rewind: true,
          use_slots: true,
          parameters: {
            wal_level: 'replica',
            hot_standby: 'on',
            wal_log_hints: 'on',
            max_wal_senders: 5,
            max_replication_slots: 5,
            wal_keep_size: '128MB',
          },
        },
      },
      initdb: [{ encoding: 'UTF8' }, 'no-sync'],
    },
    postgresql: {
      listen: `127.0.0.1:${node.port}`,
      connect_address: `127.0.0.1:${node.port}`,
      data_dir: node.dataDir,
      bin_dir: pgBin('postgres').replace(/\/postgres$/, ''),
      pgpass: join(dir, `${node.name}.pgpass`),
      authentication: {
        superuser: { username: 'postgres', password: 'postgres' },
        replication: { username: 'postgres', password: 'postgres' },
        rewind: { username: 'postgres', password: 'postgres' },
      },
      // A WAL archive all nodes share: a promotion then never reuses a timeline ID, not even
      // one of a branch Patroni discarded (pgfence's tokens carry the timeline).
      recovery_conf: { restore_command: `cp ${archive}/%f %p` },
      parameters: {
        archive_mode: 'on',
        archive_command: `test ! -f ${archive}/%f && cp %p ${archive}/%f`,
        unix_socket_directories: dir,
        shared_buffers: '32MB',
        // A crash of the process, never of the machine: durable without fsync.
        fsync: 'off',
      },
      pg_hba: [
        'local all all trust',
        'host all all 127.0.0.1/32 trust',
        'host replication all 127.0.0.1/32 trust',
      ],
    },
    watchdog: { mode: 'off' },
    tags: { nofailover: false, noloadbalance: false, clonefrom: false, nosync: false },
  }
}

/** The end of a log file (for a failure's message). */
const tail = (file: string, chars = 4000): string => {
  try {
    return readFileSync(file, 'utf8').slice(-chars)
  } catch {
    return '(no log)'
  }
}

/** GET a Patroni endpoint: its status (0: no answer within `timeoutMs`). */
async function restStatus(url: string, timeoutMs = 1000): Promise<number> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) })
    await response.arrayBuffer()
    return response.status
  } catch {
    return 0
  }
}

/** Patroni's view (GET /cluster): every member running, one the synchronous standby or none. */
async function patroniAgrees(
  leader: PatroniNode,
  size: number,
  synchronous: boolean,
): Promise<boolean> {
  try {
    const response = await fetch(`${leader.restUrl}/cluster`, { signal: AbortSignal.timeout(2000) })
    const { members } = (await response.json()) as { members: { role: string; state: string }[] }
    const standbys = members.filter((member) => member.role === 'sync_standby').length
    return (
      members.length === size &&
      members.every((member) => member.state === 'running') &&
      standbys === (synchronous ? 1 : 0)
    )
  } catch {
    return false
  }
}

/**
 * A Patroni cluster on loopback: one etcd member and `size` PostgreSQL 15 nodes, each run by
 * its own Patroni (as the OS user postgres when the tests run as root), on free ports, in a
 * temp dir. node 0 is bootstrapped first and so is the first leader. remove() kills every
 * process and removes the directory; so does the test process's exit, whatever failed.
 */
export async function startPatroniCluster(size = 2) {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-patroni-'))
  const etcd = await startEtcdCluster(1)
  const scope = `pgfence-${process.pid}-${dir.slice(-6)}`
  const nodes: NodeState[] = []
  running.add(nodes)
  const remove = async () => {
    const pids = nodes.flatMap(killNodeNow)
    await waitFor(() => pids.every((pid) => !alive(pid)), {
      what: 'the cluster processes to end',
    }).catch(() => {})
    running.delete(nodes)
    await etcd.remove()
    rmSync(dir, { recursive: true, force: true })
  }
  const start = (node: NodeState) => {
    if (node.patroni) return
    const log = openSync(node.logFile, 'a')
    const [command, args] = runningAsRoot
      ? ['runuser', ['-u', 'postgres', '--', 'patroni', node.configFile]]
      : ['patroni', [node.configFile]]
    node.patroni = spawn(command, args, { env: childEnv(), stdio: ['ignore', log, log] })
    // Not installed: the log says so, and the wait for the node fails with it.
    node.patroni.once('error', (err) => writeFileSync(node.logFile, `${err}\n`, { flag: 'a' }))
    closeSync(log)
  }
  const leader = async (): Promise<PatroniNode | null> => {
    const statuses = await Promise.all(nodes.map((n) => restStatus(`${n.restUrl}/primary`)))
    return nodes[statuses.indexOf(200)] ?? null
  }
  try {
    const owned = [dir, join(dir, 'data'), join(dir, 'archive')]
    owned.slice(1).forEach((path) => mkdirSync(path))
    await giveToClusterOwner(owned)
    for (let i = 0; i < size; i++) {
      const [port, restPort] = [await freePort(), await freePort()]
      const node: NodeState = {
        name: `node${i}`,
        port,
        hostPort: `127.0.0.1:${port}`,
        url: `postgres://postgres@127.0.0.1:${port}/postgres`,
        restUrl: `http://127.0.0.1:${restPort}`,
        dataDir: join(dir, 'data', `node${i}`),
        configFile: join(dir, `node${i}.yaml`),
        logFile: join(dir, `node${i}.log`),
        patroni: null,
      }
      writeFileSync(
        node.configFile,
        stringify(patroniConfig(node, scope, etcd.endpoints[0]!, dir, restPort)),
      )
      nodes.push(node)
    }
    start(nodes[0]!)
    await waitFor(async () => (await leader()) === nodes[0], {
      timeoutMs: 90_000,
      intervalMs: 200,
      what: 'node0 to bootstrap the cluster',
    }).catch((err: Error) => {
      throw new Error(`${err.message}; its Patroni log ends:\n${tail(nodes[0]!.logFile)}`)
    })
    nodes.slice(1).forEach(start)
  } catch (err) {
    await remove()
    throw err
  }

  const cluster = {
    nodes: nodes as readonly PatroniNode[],
    etcdEndpoint: etcd.endpoints[0]!,
    remove,
    /** The node whose GET /primary answers 200 now (it holds the leader key), else null. */
    leader,
    /** Polls until a node other than `previous` answers GET /primary 200; resolves to it. */
    async nextLeader(previous: PatroniNode | null, timeoutMs = 60_000): Promise<PatroniNode> {
      let found: PatroniNode | null = null
      await waitFor(
        async () => {
          found = await leader()
          return found !== null && found !== previous
        },
        { timeoutMs, intervalMs: 20, what: 'a new Patroni leader' },
      )
      return found!
    },
    /**
     * Waits until one node leads and every other one streams from it on its timeline, in
     * synchronous mode with one of them as the synchronous standby.
     */
    async healthy(synchronous: boolean, timeoutMs = 120_000): Promise<PatroniNode> {
      let current: PatroniNode | null = null
      await waitFor(
        async () => {
          current = await leader()
          if (!current || !(await patroniAgrees(current, size, synchronous))) return false
          const client = new pg.Client({ connectionString: current.url })
          try {
            await client.connect()
            const { rows } = await client.query(
              `SELECT count(*) FILTER (WHERE state = 'streaming')::int AS streaming,
                      count(*) FILTER (WHERE sync_state = 'sync')::int AS sync,
                      current_setting('synchronous_standby_names') AS names
                 FROM pg_stat_replication`,
            )
            const [row] = rows as { streaming: number; sync: number; names: string }[]
            return (
              row!.streaming === size - 1 &&
              (synchronous ? row!.sync >= 1 : row!.names === '' && row!.sync === 0)
            )
          } catch {
            return false
          } finally {
            await client.end().catch(() => {})
          }
        },
        { timeoutMs, intervalMs: 200, what: 'the cluster to be healthy' },
      )
      return current!
    },
    /** kill -9 of the node's Patroni and of its postmaster (and its backends). */
    async crash(node: PatroniNode): Promise<void> {
      const pids = killNodeNow(stateOf(node))
      await waitFor(() => pids.every((pid) => !alive(pid)), { what: `${node.name} to die` })
    },
    /** Starts the node's Patroni again (after crash): it rejoins as a replica. */
    restart: (node: PatroniNode) => start(stateOf(node)),
    /** SIGSTOP of the node's Patroni only: PostgreSQL runs on (crash ends both). */
    freeze(node: PatroniNode): void {
      signal(patroniTree(stateOf(node)), 'SIGSTOP')
    },
    /**
     * Rebuilds a replica from the leader (REST POST /reinitialize), as an operator does with a
     * node that cannot rewind onto the leader's branch.
     */
    async reinitialize(node: PatroniNode): Promise<void> {
      const response = await fetch(`${node.restUrl}/reinitialize`, {
        method: 'POST',
        body: JSON.stringify({ force: true }),
        signal: AbortSignal.timeout(60_000),
      })
      const body = await response.text()
      if (response.status !== 200) throw new Error(`reinitialize: ${response.status} ${body}`)
    },
    /** The last lines of each node's Patroni log, to say why a wait failed. */
    logTails(lines = 15): string {
      return nodes
        .map((node) => {
          const log = readFileSync(stateOf(node).logFile, 'utf8')
          return `${node.name}:\n${log.trimEnd().split('\n').slice(-lines).join('\n')}`
        })
        .join('\n')
    },
    /** Patroni's planned switchover (REST POST /switchover) from the leader to `candidate`. */
    async switchover(from: PatroniNode, candidate: PatroniNode): Promise<void> {
      const response = await fetch(`${from.restUrl}/switchover`, {
        method: 'POST',
        body: JSON.stringify({ leader: from.name, candidate: candidate.name }),
        signal: AbortSignal.timeout(60_000),
      })
      const body = await response.text()
      if (response.status !== 200) throw new Error(`switchover: ${response.status} ${body}`)
    },
    /** Patroni's dynamic configuration (REST PATCH /config on the leader): synchronous_mode. */
    async setSynchronous(on: boolean): Promise<void> {
      const current = (await leader()) ?? nodes[0]!
      const response = await fetch(`${current.restUrl}/config`, {
        method: 'PATCH',
        body: JSON.stringify({ synchronous_mode: on }),
        signal: AbortSignal.timeout(10_000),
      })
      if (response.status !== 200) throw new Error(`PATCH /config: ${await response.text()}`)
    },
  }
  function stateOf(node: PatroniNode): NodeState {
    const state = nodes.find((n) => n.name === node.name)
    if (!state) throw new Error(`no node ${node.name}`)
    return state
  }
  return cluster
}

export type PatroniCluster = Awaited<ReturnType<typeof startPatroniCluster>>
