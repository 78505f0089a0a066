import pg from 'pg'
import { parseConfig } from '../../src/config/load.js'
import type { FencingConfig } from '../../src/config/schema.js'
import { createRewriter, type FencingRewriter } from '../../src/rewrite/rewriter.js'
import { installSql } from '../../src/schema/install.js'
import type { ConfigOverrides } from '../support/proxy.js'
export { sqlstateOf } from '../support/sqlstate.js'

/** A fencing config with the given `fencing` section (defaults for the rest). */
export function fencingConfig(fencing: ConfigOverrides['fencing'] = {}): FencingConfig {
  return parseConfig({ fencing }).fencing
}

/** Runs what `pgfence migrate` runs against the database at `url`. */
export async function installFencing(url: string, fencing: FencingConfig): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await client.query(installSql(fencing))
  } finally {
    await client.end()
  }
}

/** The `invoices` table of the product story: row 99, PENDING, token 100. */
export const invoicesSql = `
CREATE TABLE invoices (id int PRIMARY KEY, status text NOT NULL, amount int NOT NULL DEFAULT 0);
`
export const seedInvoice99 = `
INSERT INTO invoices (id, status, fencing_token) VALUES (99, 'PENDING', 100)
ON CONFLICT (id) DO UPDATE SET status = 'PENDING', fencing_token = 100;
`

/**
 * A direct connection whose statements go through the rewriter, as the proxy sends them:
 * parameterless text as a simple Query, the rest as a Parse.
 */
export class FencedClient {
  readonly raw: pg.Client

  constructor(
    url: string,
    private readonly rewriter: FencingRewriter,
  ) {
    this.raw = new pg.Client({ connectionString: url })
  }

  async connect(): Promise<void> {
    await this.raw.connect()
  }

  end(): Promise<void> {
    return this.raw.end()
  }

  query(text: string, values?: unknown[], name?: string): Promise<pg.QueryResult> {
    if (values === undefined && name === undefined) {
      return this.raw.query(this.rewriter.rewriteQuery(text) ?? text)
    }
    const upstream = this.rewriter.rewriteParse(text) ?? text
    return this.raw.query({ text: upstream, values: values ?? [], ...(name ? { name } : {}) })
  }
}

export async function fencedClient(url: string, fencing: FencingConfig): Promise<FencedClient> {
  const client = new FencedClient(url, await createRewriter(fencing))
  await client.connect()
  return client
}
