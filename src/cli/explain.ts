import { parseArgs } from 'node:util'
import { loadConfigFile } from '../config/load.js'
import type { Config } from '../config/schema.js'
import { statementEffects } from '../pool/transaction-rules.js'
import { transactionPoolRefusal } from '../pool/transaction-pool-refusals.js'
import { createRewriter, type FencingRewriter, type Rewrite } from '../rewrite/rewriter.js'
import type { Refusal } from '../rewrite/refusal.js'
import { tokenRefusal } from '../rewrite/token-refusals.js'

export const usage = 'usage: pgfence explain --config FILE [--token N] "SQL"'

/**
 * `pgfence explain`: what pgfence would send upstream for a statement (to a database migrated with
 * the config), or the SQLSTATE the statement would get and why. `--token`: the session's token.
 * Exits 1 when the statement would be refused, 0 when it would be sent.
 */
export async function run(argv: string[]): Promise<number> {
  let parsed: { values: { config?: string; token?: string }; positionals: string[] }
  try {
    parsed = parseArgs({
      args: argv,
      options: { config: { type: 'string' }, token: { type: 'string' } },
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
  let config: Config
  let rewriter: FencingRewriter
  try {
    config = loadConfigFile(values.config)
    rewriter = await createRewriter(config.fencing)
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`)
    return 2
  }
  const sql = positionals[0]!
  // As a transaction pool does: such a statement is refused before any rewrite.
  const pooled = config.pool.mode === 'transaction' ? statementEffects(sql).refused : null
  const rewrite = pooled ? { upstream: null, refusals: [] } : rewriter.explain(sql)
  const token = tokenRefusal(
    rewrite.writes ?? [],
    rewrite.commentToken,
    values.token,
    config.fencing,
  )
  const refusals: Described[] = [
    ...(pooled ? [transactionPoolRefusal(pooled)] : []),
    ...rewrite.refusals,
    ...(token ? [token] : []),
  ]
  process.stdout.write(
    refusals.length > 0 ? refusals.map(describe).join('') : sent(rewrite, values.token),
  )
  return refusals.length > 0 ? 1 : 0
}

type Described = Pick<Refusal, 'message' | 'detail' | 'hint'> & { code: string }

function describe(refusal: Described): string {
  return `refused: ${refusal.code} ${refusal.message}\n  DETAIL: ${refusal.detail}\n  HINT: ${refusal.hint}\n`
}

/** The text sent upstream, and the token its fenced writes are checked with when they run. */
function sent(rewrite: Rewrite, session: string | undefined): string {
  const text =
    rewrite.upstream === null ? 'passes through unchanged\n' : `upstream: ${rewrite.upstream}\n`
  const writes = rewrite.writes ?? []
  const token = rewrite.commentToken?.token ?? session
  if (writes.length === 0 || token === undefined) return text
  const source = rewrite.commentToken ? 'comment' : 'session'
  const tables = [...new Set(writes.map((write) => write.relation))].join(', ')
  return `${text}fenced: ${tables}, with token ${token} (${source}); PF409 if a row or resource holds a higher one\n`
}
