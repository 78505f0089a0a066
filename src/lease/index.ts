export {
  LeaseManager,
  type LeaseManagerOptions,
  type AcquireOptions,
  type WithLeaseOptions,
} from './lease-manager.js'
export { Lease, type Queryable } from './lease.js'
export { LeaseUnavailableError, LeaseLostError, type LeaseEndReason } from './errors.js'
export type { TokenQueryable } from './token-issuer.js'
