export {
  LeaseManager,
  type LeaseManagerOptions,
  type AcquireOptions,
  type WithLeaseOptions,
} from './lease-manager.js'
export { Lease, type Queryable } from './lease.js'
export { LeaseUnavailableError, LeaseLostError, type LeaseEndReason } from './errors.js'
export type { TokenQueryable } from './token-issuer.js'
export type { LeaseStoreOption } from './store-option.js'
export type { LeaseQueryable } from './postgres-lease-store.js'
export type { EtcdSource } from './etcd-lease-store.js'
