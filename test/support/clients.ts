import pg from 'pg'

/** Logs in with node-postgres and returns current_user. */
export async function currentUserAt(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return (await client.query('SELECT current_user AS name')).rows[0].name
  } finally {
    await client.end()
  }
}
