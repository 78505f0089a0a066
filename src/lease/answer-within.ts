/**
 * Settles as `request` does, unless it is still pending after `ms`: then it rejects with the
 * error `giveUp()` returns. While that is undefined it keeps waiting for `request`, and asks
 * `giveUp()` again every `recheckMs` if given. An 'unref' timer never keeps the process alive (a
 * lease's background renewal); a 'ref' one does, for a caller that awaits the answer (acquire).
 */
export function answerWithin<T>(
  request: Promise<T>,
  ms: number,
  giveUp: () => Error | undefined,
  timer: 'ref' | 'unref',
  recheckMs?: number,
): Promise<T> {
  let timeout: NodeJS.Timeout | undefined
  const gaveUp = new Promise<never>((_, reject) => {
    const check = () => {
      const error = giveUp()
      if (error) reject(error)
      else if (recheckMs !== undefined) schedule(recheckMs)
    }
    const schedule = (delay: number) => {
      timeout = setTimeout(check, Math.max(0, delay))
      if (timer === 'unref') timeout.unref()
    }
    schedule(ms)
  })
  return Promise.race([request, gaveUp]).finally(() => clearTimeout(timeout))
}
