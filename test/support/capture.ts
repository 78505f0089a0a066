import { vi } from 'vitest'

/** Runs a command with stdout captured. */
export async function capture(
  command: () => Promise<number>,
): Promise<{ code: number; out: string }> {
  let out = ''
  const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    out += String(chunk)
    return true
  })
  try {
    return { code: await command(), out }
  } finally {
    spy.mockRestore()
  }
}
