import { parseArgs } from 'node:util'
import { loadConfigFile } from '../config/load.js'
import { createRewriter, type FencingRewriter } from '../rewrite/rewriter.js'

export const usage = 'usage: pgfence explain --config FILE "SQL"'

/** `pgfence explain`: what pgfence would send upstream for a statement, or why it refuses it. */
export async function run(argv: string[]): Promise<number> {
  let parsed: { values: { config?: string }; positionals: string[] }
  try {
    parsed = parseArgs({
      args: argv,
      options: { config: { type: 'string' } },
      allowPositionals: true,
    })
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${usage}\n`)
    return 2
  }
  const { values, positionals } = parsed
  if (!values.config || positionals.length !== 1) {
    process.stderr.write(`${usage}\n`)
    return 2
  }
  let rewriter: FencingRewriter
  try {
    rewriter = await createRewriter(loadConfigFile(values.config).fencing)
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`)
    return 2
  }
  const { upstream, refusals } = rewriter.explain(positionals[0]!)
  for (const refusal of refusals) {
    process.stdout.write(
      `refused: ${refusal.code} ${refusal.message}\n  DETAIL: ${refusal.detail}\n  HINT: ${refusal.hint}\n`,
    )
  }
  process.stdout.write(upstream === null ? 'passes through unchanged\n' : `upstream: ${upstream}\n`)
  return 0
}
