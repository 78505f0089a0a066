/** The SQLSTATE a promise is rejected with, or 'ok'. */
export async function sqlstateOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise
    return 'ok'
  } catch (err) {
    const code = (err as { code?: string }).code
    if (code === undefined) throw err
    return code
  }
}
