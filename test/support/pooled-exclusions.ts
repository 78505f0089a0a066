import { beforeEach } from 'vitest'
import { poolUnderTest } from './proxy.js'

/**
 * The cases of the pooled runs (vitest.config) that cannot apply to a pool mode, by test name,
 * each with the README "Pooling" rule that rules it out. They are reported as skipped with it.
 */
const notUnderPool: Record<'session' | 'transaction', Record<string, string>> = {
  session: {},
  transaction: {
    'a NOTIFY sent with psql reaches a client listening through the proxy':
      'LISTEN is refused with 0A000 in transaction mode',
    'without fenced tables, standard_conforming_strings may be turned off':
      'a session SET other than the tracked ones lasts only until its transaction ends',
    'the fence is entered once per statement, by a one-time filter that runs before the scan':
      'it counts calls under a session SET track_functions, which lasts only a transaction',
  },
}

beforeEach((context) => {
  const mode = poolUnderTest()
  const reason = mode && notUnderPool[mode][context.task.name]
  if (reason) context.skip(`not under pool.mode ${mode}: ${reason}`)
})
