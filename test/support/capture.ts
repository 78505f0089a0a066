import { vi } from 'vitest'

/** Runs a command with stdout and stderr captured. */
export async function capture(
  command: () => Promise<number>,
): Promise<{ code: number; out: string; err: string }> {
  const written = { out: '', err: '' }
  const spies = (['out', 'err'] as const).map((stream) =>
    vi.spyOn(process[`std${stream}`], 'write').mockImplementation((chunk) => {
      written[stream] += String(chunk)
      return true
    }),
  )
  try {
    return { code: await command(), ...written }
  } finally {
    for (const spy of spies) spy.mockRestore()
  }
}
