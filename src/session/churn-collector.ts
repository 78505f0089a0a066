import v8 from 'node:v8'
import vm from 'node:vm'
import { nativeRelayModule } from '../relay/native-relay.js'

/** Closed sessions that make a collection worth its pause (a few ms for the proxy's heap). */
const CLOSED_SESSIONS_PER_COLLECTION = 100
/** The collection waits until sessions have stopped closing for this long. */
const QUIET_MS = 500

/** V8's full collection, which Node exposes only under --expose-gc. */
function fullCollection(): () => void {
  v8.setFlagsFromString('--expose-gc')
  return vm.runInNewContext('gc') as () => void
}

/**
 * Collects the JavaScript heap once many sessions have closed and closing has paused. A
 * session's objects live long enough to reach the old generation, where V8 leaves them until
 * the heap has grown by a good part of its size: without this, resident memory climbs by tens
 * of kB per closed session between V8's own full collections, and each wave of connections
 * starts higher than the one before. The native memory the collection frees is then given back
 * to the system.
 */
export class ChurnCollector {
  private closed = 0
  private timer: NodeJS.Timeout | null = null
  private readonly collect = fullCollection()

  sessionClosed(): void {
    if (++this.closed < CLOSED_SESSIONS_PER_COLLECTION) return
    if (this.timer) this.timer.refresh()
    else this.timer = setTimeout(() => this.run(), QUIET_MS).unref()
  }

  private run(): void {
    this.timer = null
    this.closed = 0
    this.collect()
    nativeRelayModule?.releaseFreeMemory()
  }
}
