/**
 * What `take` answers for a lease it granted: the fencing token when the store draws it in the
 * grant itself (the postgres store), else none and the manager draws one after the grant.
 */
export interface TakenLease {
  token?: bigint
}

/**
 * Where leases live: Redis keys, etcd leases or PostgreSQL rows, with the same meaning. Each
 * lease is a record for `resource` naming its `owner` that the store ends by itself `ttlMs`
 * after the last take or renewal, by the store's own clock.
 */
export interface LeaseStore {
  /** What an error says does not answer: 'the lease store (Redis)'. */
  readonly name: string
  /** Creates the record if no live one exists; null when another owner holds it. */
  take(resource: string, owner: string, ttlMs: number): Promise<TakenLease | null>
  /** Extends the record by `ttlMs` while it is still live and `owner`'s; false otherwise. */
  renew(resource: string, owner: string, ttlMs: number): Promise<boolean>
  /** Ends the record if it is still live and `owner`'s (compare-and-delete); false otherwise. */
  release(resource: string, owner: string): Promise<boolean>
  /**
   * Why the store does not answer now (its connection is down, with its last error); undefined
   * while it may still answer. Lets acquire give up at waitMs without waiting out a request.
   */
  failure(): Error | undefined
  /** A store that issues the tokens (postgres): the timeline it issues them on now. */
  timeline?(): Promise<number>
  /** Closes connections the store opened itself; ones passed in stay open. */
  close(): Promise<void>
}
