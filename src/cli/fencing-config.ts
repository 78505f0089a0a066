import { loadConfigFile } from '../config/load.js'
import type { FencingConfig } from '../config/schema.js'

/** The fencing section of a config file, or null once stderr says why it cannot be read. */
export function fencingOf(file: string): FencingConfig | null {
  try {
    return loadConfigFile(file).fencing
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`)
    return null
  }
}
