import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { accessSync, constants, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { freePort } from './free-port.js'
import { startFreezableProxy } from './freezable-proxy.js'

const masterName = 'pgfence-failover'

/** The binaries of Debian's redis-server and redis-sentinel packages. */
const binaries = ['redis-server', 'redis-sentinel'] as const

/** The first of the binaries that is not on PATH, or null when both are. */
export function missingRedisBinary(): string | null {
  const dirs = (process.env.PATH ?? '').split(delimiter).filter(Boolean)
  const found = (name: string) =>
    dirs.some((dir) => {
      try {
        accessSync(join(dir, name), constants.X_OK)
        return true
      } catch {
        return false
      }
    })
  return binaries.find((name) => !found(name)) ?? null
}

/**
 * A Redis primary, a replica and a Sentinel of their own on free loopback ports, in a temp dir.
 * The replica replicates through a relay that can be frozen: from then on no byte the primary
 * sends reaches the replica, as when a primary dies before its asynchronous replication caught
 * up. `signal` ends any wait early.
 */
export async function startRedisFailover(signal?: AbortSignal) {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-redis-failover-'))
  const processes: ChildProcess[] = []
  const run = (binary: (typeof binaries)[number], args: string[]) => {
    const child = spawn(binary, args, { stdio: 'ignore' })
    child.on('error', () => {}) // not started: the wait for it to answer says so
    processes.push(child)
    return child
  }
  const [primaryPort, replicaPort, sentinelPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
  ]
  const relay = await startFreezableProxy(new URL(`redis://127.0.0.1:${primaryPort}`))
  const relayPort = Number(new URL(relay.url).port)
  const sentinel = new Redis({ port: sentinelPort, host: '127.0.0.1', lazyConnect: true })
  sentinel.on('error', () => {})
  const stopAll = async () => {
    sentinel.disconnect()
    await relay.close()
    await Promise.all(
      processes.map(async (child) => {
        if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return
        const exited = once(child, 'exit')
        child.kill('SIGKILL')
        await exited
      }),
    )
    rmSync(dir, { recursive: true, force: true })
  }
  const wait = (condition: () => Promise<boolean>, what: string) => until(condition, what, signal)
  // A replica stores the RDB of its full sync in --dir: the temp dir, never the working directory.
  const plain = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]
  // The replica's first sync starts at once, not after the 5 s Redis waits for more replicas.
  const primary = run('redis-server', [
    ...['--port', String(primaryPort), ...plain],
    ...['--repl-diskless-sync-delay', '0'],
  ])
  try {
    await wait(
      () => ask(primaryPort, async (redis) => (await redis.ping()) === 'PONG'),
      'the Redis primary to answer',
    )
    run('redis-server', [
      ...['--port', String(replicaPort), ...plain],
      ...['--replicaof', '127.0.0.1', String(relayPort)],
    ])
    // Synced before Sentinel starts: its first look at the primary lists the replica.
    await wait(
      () =>
        ask(replicaPort, async (replica) =>
          (await replica.info('replication')).includes('master_link_status:up'),
        ),
      'the Redis replica to sync',
    )
    const sentinelConfig = join(dir, 'sentinel.conf')
    writeFileSync(
      sentinelConfig,
      [
        `port ${sentinelPort}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor ${masterName} 127.0.0.1 ${primaryPort} 1`,
        `sentinel down-after-milliseconds ${masterName} 1000`,
        // Sentinel points a replica that replicates from another address than the primary's (the
        // relay's) at the primary itself once this long has passed, which would let the lease's
        // key through: ten minutes is longer than any round, and a failover takes seconds anyway.
        `sentinel failover-timeout ${masterName} 600000`,
        '',
      ].join('\n'),
    )
    run('redis-sentinel', [sentinelConfig])
    await wait(async () => {
      const replicas = (await sentinel.call('SENTINEL', 'REPLICAS', masterName)) as string[][]
      return replicas.length === 1 && !String(replicas[0]).includes('s_down')
    }, 'Sentinel to see the Redis replica')
  } catch (err) {
    await stopAll()
    throw err
  }
  return {
    primaryUrl: `redis://127.0.0.1:${primaryPort}`,
    replicaUrl: `redis://127.0.0.1:${replicaPort}`,
    /** ioredis options that find the current primary through Sentinel. */
    sentinelOptions: { sentinels: [{ host: '127.0.0.1', port: sentinelPort }], name: masterName },
    /** From now on nothing written to the primary reaches the replica. */
    holdBackReplica: () => relay.freeze(),
    /**
     * Kills the primary (then calls `onPrimaryKilled`), and waits until Sentinel has promoted the
     * replica. First it makes sure
     * the replica still replicates through the frozen relay, so nothing held back reached it.
     */
    failOver: async (onPrimaryKilled: () => void = () => {}) => {
      const behindRelay = await ask(replicaPort, async (replica) =>
        (await replica.info('replication')).includes(`master_port:${relayPort}\r\n`),
      )
      if (!behindRelay) throw new Error('the Redis replica no longer replicates through the relay')
      const exited = once(primary, 'exit')
      primary.kill('SIGKILL')
      await exited
      onPrimaryKilled()
      // Sentinel fails over on its own within seconds. One that gave up a first attempt (under
      // load, its last look at the replica can be too old when it picks one) would try again
      // only after twice failover-timeout: past a few seconds it is asked to fail over now.
      let askAt = Date.now() + 5000
      await wait(async () => {
        const address = (await sentinel.call(
          'SENTINEL',
          'GET-MASTER-ADDR-BY-NAME',
          masterName,
        )) as string[]
        if (address[1] === String(replicaPort)) return true
        if (Date.now() > askAt) {
          askAt = Date.now() + 2000
          // Refused while a failover runs (INPROG) or no replica is fit yet: asked again later.
          await sentinel.call('SENTINEL', 'FAILOVER', masterName).catch(() => {})
        }
        return false
      }, 'Sentinel to promote the Redis replica')
      await wait(
        () =>
          ask(
            replicaPort,
            async (replica) => ((await replica.call('ROLE')) as string[])[0] === 'master',
          ),
        'the Redis replica to take the primary role',
      )
    },
    stop: stopAll,
  }
}

/** Asks the server on `port` one question on a connection of its own; false if it is down. */
async function ask(port: number, question: (redis: Redis) => Promise<boolean>): Promise<boolean> {
  const redis = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null })
  redis.on('error', () => {})
  try {
    return await question(redis)
  } finally {
    redis.disconnect()
  }
}

/** Polls `condition` every 50 ms for up to 20 s, or until `signal` aborts. */
async function until(
  condition: () => Promise<boolean>,
  what: string,
  signal: AbortSignal | undefined,
): Promise<void> {
  const deadline = Date.now() + 20_000
  for (;;) {
    signal?.throwIfAborted()
    if (await condition().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    // Aborted: the signal's reason, not the AbortError of the delay.
    await delay(50, undefined, { signal }).catch(() => signal?.throwIfAborted())
  }
}
