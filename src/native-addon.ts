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

/** A server link the addon keeps between sessions (src/native/server-link.c), opaque. */
export type ServerLinkHandle = { readonly brand: unique symbol }

/** A relay the addon made for a login it lent a server connection (src/native/relay.h), opaque. */
export type CompiledRelayHandle = { readonly brand: unique symbol }
