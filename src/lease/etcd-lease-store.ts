import type { Etcd3, Lease as EtcdLease } from 'etcd3'
import type { LeaseStore, TakenLease } from './lease-store.js'

/** One etcd member URL (`http://127.0.0.1:2379`), several, or an etcd3 client. */
export type EtcdSource = string | string[] | Etcd3

/** etcd counts lease TTLs in whole seconds: a TTL is rounded up, never down. */
export const etcdTtlSeconds = (ttlMs: number): number => Math.ceil(ttlMs / 1000)

interface HeldKey {
  lease: EtcdLease
  ttlMs: number
}

/**
 * Leases as etcd leases: the key is created, bound to a fresh etcd lease, only if absent
 * (createRevision == 0); each renewal is one keep-alive, and the key must still name its owner;
 * a release deletes the key if still its own and revokes the lease. Every call carries a
 * deadline of one TTL: an answer later than that could not grant or extend anything usable.
 */
export class EtcdLeaseStore implements LeaseStore {
  readonly name = 'the lease store (etcd)'
  private readonly held = new Map<string, HeldKey>()
  private readonly etcd = import('etcd3')
  /** The connection error of the last take that failed for want of a connection. */
  private connectionError: Error | undefined

  private constructor(
    private readonly client: Promise<Etcd3>,
    private readonly ownClient: boolean,
    private readonly keyPrefix: string,
  ) {}

  /**
   * Endpoints get a client of their own, closed by `close()`; a client passed in stays open. The
   * etcd3 module (gRPC) is loaded only when the store first needs it.
   */
  static from(source: EtcdSource, keyPrefix: string): EtcdLeaseStore {
    if (typeof source === 'string' || Array.isArray(source)) {
      const client = import('etcd3').then(({ Etcd3 }) => new Etcd3({ hosts: source }))
      return new EtcdLeaseStore(client, true, keyPrefix)
    }
    return new EtcdLeaseStore(Promise.resolve(source), false, keyPrefix)
  }

  keyOf(resource: string): string {
    return this.keyPrefix + resource
  }

  /**
   * After a few connection failures in a row etcd3 stops calling the host for a while (its
   * circuit breaker) and fails with an error of its own that only says so: then the connection
   * error that opened the breaker is the reason given.
   */
  async take(resource: string, owner: string, ttlMs: number): Promise<TakenLease | null> {
    const { isRecoverableError, GRPCGenericError, EtcdError } = await this.etcd
    try {
      const taken = await this.tryTake(resource, owner, ttlMs)
      this.connectionError = undefined
      return taken
    } catch (err) {
      if (!(err instanceof Error)) throw err
      if (isRecoverableError(err)) this.connectionError = err
      const fromEtcd = err instanceof GRPCGenericError || err instanceof EtcdError
      throw fromEtcd ? err : (this.connectionError ?? err)
    }
  }

  private async tryTake(
    resource: string,
    owner: string,
    ttlMs: number,
  ): Promise<TakenLease | null> {
    const client = await this.client
    const key = this.keyOf(resource)
    const lease = client.lease(etcdTtlSeconds(ttlMs), { autoKeepAlive: false, ...within(ttlMs) })
    const id = await lease.grant()
    const { succeeded } = await client
      .if(key, 'Create', '==', 0)
      .then(client.put(key).value(owner).lease(id))
      .options(within(ttlMs))
      .commit()
      .catch(async (err: unknown) => {
        // Whether or not the put landed, revoking the lease removes its key.
        await lease.revoke(within(ttlMs)).catch(() => {})
        throw err
      })
    if (succeeded) {
      this.held.set(owner, { lease, ttlMs })
      return {}
    }
    await lease.revoke(within(ttlMs))
    return null
  }

  async renew(resource: string, owner: string): Promise<boolean> {
    const held = this.held.get(owner)
    if (!held) return false
    try {
      await held.lease.keepaliveOnce(within(held.ttlMs))
    } catch (err) {
      // etcd answered that the lease is gone (expired or revoked).
      if (held.lease.revoked()) return false
      throw err
    }
    const client = await this.client
    const { succeeded } = await client
      .if(this.keyOf(resource), 'Value', '==', owner)
      .options(within(held.ttlMs))
      .commit()
    return succeeded
  }

  async release(resource: string, owner: string): Promise<boolean> {
    const held = this.held.get(owner)
    if (!held) return false
    this.held.delete(owner)
    const client = await this.client
    const key = this.keyOf(resource)
    const { succeeded } = await client
      .if(key, 'Value', '==', owner)
      .then(client.delete().key(key))
      .options(within(held.ttlMs))
      .commit()
    await held.lease.revoke(within(held.ttlMs))
    return succeeded
  }

  /** Nothing known ahead of a request: every etcd call has a deadline of its own. */
  failure(): Error | undefined {
    return undefined
  }

  async close(): Promise<void> {
    if (this.ownClient) (await this.client).close()
  }
}

function within(ms: number): { deadline: Date } {
  return { deadline: new Date(Date.now() + ms) }
}
