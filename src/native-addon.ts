import { createRequire } from 'node:module'

/**
 * The compiled addon (src/native: the relay, its TLS channels), or null when it was not built.
 * PGFENCE_NATIVE_ADDON names another build of it (CI's sanitizer build, .ci/native-checks).
 * Every user takes the same instance: a TLS channel made by one is relayed by the other.
 */
export const nativeAddon: Record<string, unknown> | null = (() => {
  try {
    const path = process.env.PGFENCE_NATIVE_ADDON || '../build/Release/pgfence_relay.node'
    return createRequire(import.meta.url)(path)
  } catch {
    return null
  }
})()
