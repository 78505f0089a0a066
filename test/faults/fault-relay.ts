import net from 'node:net'

/**
 * What the relay does to traffic. pass: forwards; delay: forwards each chunk `delayMs` late;
 * freeze: a black hole (keeps every connection open, forwards nothing, accepts new ones the
 * same way); reset: resets every connection (RST) and each new one; silent: accepts new
 * connections and never answers (existing ones pass); closeDuringStartup: reads a new
 * connection's first bytes and closes it.
 */
export type FaultMode = 'pass' | 'delay' | 'freeze' | 'reset' | 'silent' | 'closeDuringStartup'

interface Pair {
  client: net.Socket
  server?: net.Socket
}

/** A chunk on its way to one socket, and when it may be written. */
interface Pending {
  chunk: Buffer
  due: number
}

/**
 * A TCP relay between pgfence and the real PostgreSQL, in the test's own process, that injects
 * the failures of a network or a server in the path: the faults the proxy must survive.
 */
export class FaultRelay {
  private mode: FaultMode = 'pass'
  private delayMs = 0
  private readonly pairs = new Set<Pair>()
  /** Chunks not written yet, per destination, in the order they came (as TCP keeps them). */
  private readonly queues = new Map<net.Socket, Pending[]>()

  private constructor(
    private readonly server: net.Server,
    private readonly target: { host: string; port: number },
  ) {
    server.on('connection', (socket) => this.accept(socket))
  }

  static async start(target: { host: string; port: number }): Promise<FaultRelay> {
    const server = net.createServer()
    const relay = new FaultRelay(server, target)
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    return relay
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port
  }

  /** Connections open between pgfence and PostgreSQL through the relay. */
  get connectionCount(): number {
    return [...this.pairs].filter((pair) => pair.server && !pair.server.destroyed).length
  }

  set(mode: FaultMode, delayMs = 0): void {
    this.mode = mode
    this.delayMs = delayMs
    if (mode !== 'reset') return
    for (const pair of this.pairs) this.reset(pair)
  }

  async close(): Promise<void> {
    for (const pair of this.pairs) this.reset(pair)
    await new Promise<void>((resolve) => this.server.close(() => resolve()))
  }

  private accept(client: net.Socket): void {
    const pair: Pair = { client }
    this.pairs.add(pair)
    client.on('error', () => {})
    client.on('close', () => {
      pair.server?.destroy()
      this.pairs.delete(pair)
    })
    switch (this.mode) {
      case 'reset':
        return this.reset(pair)
      case 'freeze':
      case 'silent':
        return void client.resume()
      case 'closeDuringStartup':
        return void client.once('data', () => client.end())
      default:
        this.connect(pair)
    }
  }

  private connect(pair: Pair): void {
    const server = net.connect(this.target)
    pair.server = server
    server.on('error', () => {})
    server.on('close', () => pair.client.destroy())
    pair.client.on('data', (chunk: Buffer) => this.forward(chunk, server))
    server.on('data', (chunk: Buffer) => this.forward(chunk, pair.client))
  }

  /**
   * Forwards a chunk, `delayMs` late in delay mode. A chunk never overtakes one still delayed
   * on the same connection, whatever the mode is now: the relay delays bytes, as a slow network
   * does, but never reorders them.
   */
  private forward(chunk: Buffer, to: net.Socket): void {
    if (this.mode === 'freeze') return
    const delayMs = this.mode === 'delay' ? this.delayMs : 0
    const queue = this.queues.get(to)
    const pending = { chunk, due: performance.now() + delayMs }
    if (queue) return void queue.push(pending)
    this.queues.set(to, [pending])
    this.drain(to)
  }

  /** Writes the due chunks of one destination in order; waits for the next one's time. */
  private drain(to: net.Socket): void {
    const queue = this.queues.get(to)!
    while (queue.length > 0) {
      const wait = queue[0]!.due - performance.now()
      if (wait > 0) return void setTimeout(() => this.drain(to), wait)
      const { chunk } = queue.shift()!
      if (!to.destroyed) to.write(chunk)
    }
    this.queues.delete(to)
  }

  private reset(pair: Pair): void {
    pair.client.resetAndDestroy()
    pair.server?.resetAndDestroy()
    this.pairs.delete(pair)
  }
}
