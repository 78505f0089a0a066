import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as delay } from 'node:timers/promises'
import { Redis } from 'ioredis'
import { freePort } from '../../e2e/support/ports.js'
import { startFreezableProxy } from './freezable-proxy.js'

const masterName = 'pgfence-test'

/**
 * A Redis primary, a replica and a Sentinel of their own on free loopback ports. The replica
 * replicates through a relay that can be frozen: writes to the primary then never reach it, as
 * when a primary dies before its asynchronous replication caught up.
 */
export async function startRedisFailover() {
  const dir = mkdtempSync(join(tmpdir(), 'pgfence-redis-failover-'))
  const processes: ChildProcess[] = []
  const run = (args: string[]) => {
    const child = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'inherit'] })
    processes.push(child)
    return child
  }
  // A replica stores the RDB of its full sync in --dir: the temp dir, never the working directory.
  const plain = ['--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]
  const [primaryPort, replicaPort, sentinelPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
  ]
  const primary = run(['--port', String(primaryPort), ...plain])
  await until(
    () => ask(primaryPort, async (redis) => (await redis.ping()) === 'PONG'),
    'the primary to answer',
  )
  const relay = await startFreezableProxy(new URL(`redis://127.0.0.1:${primaryPort}`))
  const relayPort = Number(new URL(relay.url).port)
  run(['--port', String(replicaPort), ...plain, '--replicaof', '127.0.0.1', String(relayPort)])
  const sentinelConfig = join(dir, 'sentinel.conf')
  writeFileSync(
    sentinelConfig,
    [
      `port ${sentinelPort}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `sentinel monitor ${masterName} 127.0.0.1 ${primaryPort} 1`,
      `sentinel down-after-milliseconds ${masterName} 500`,
      `sentinel failover-timeout ${masterName} 5000`,
      '',
    ].join('\n'),
  )
  run([sentinelConfig, '--sentinel'])
  const sentinel = new Redis({ port: sentinelPort, host: '127.0.0.1', lazyConnect: true })
  sentinel.on('error', () => {})
  const stopAll = async () => {
    sentinel.disconnect()
    await relay.close()
    await Promise.all(
      processes.map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null) return
        const exited = once(child, 'exit')
        child.kill('SIGKILL')
        await exited
      }),
    )
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    await until(
      () =>
        ask(replicaPort, async (replica) =>
          (await replica.info('replication')).includes('master_link_status:up'),
        ),
      'the replica to sync',
    )
    await until(async () => {
      const replicas = (await sentinel.call('SENTINEL', 'REPLICAS', masterName)) as string[][]
      return replicas.length === 1 && !String(replicas[0]).includes('s_down')
    }, 'Sentinel to see the replica')
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
    /** Kills the primary, then waits until Sentinel has promoted the replica. */
    failOver: async () => {
      const exited = once(primary, 'exit')
      primary.kill('SIGKILL')
      await exited
      await until(async () => {
        const address = (await sentinel.call(
          'SENTINEL',
          'GET-MASTER-ADDR-BY-NAME',
          masterName,
        )) as string[]
        return address[1] === String(replicaPort)
      }, 'Sentinel to promote the replica')
      await until(
        () =>
          ask(
            replicaPort,
            async (replica) => ((await replica.call('ROLE')) as string[])[0] === 'master',
          ),
        'the replica to take the primary role',
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

/** Polls `condition` every 50 ms for up to 20 s. */
async function until(condition: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 20_000
  for (;;) {
    if (await condition().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await delay(50)
  }
}
