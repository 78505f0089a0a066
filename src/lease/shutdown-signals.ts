/** Something that can give up everything it holds before the process exits. */
export interface ShutdownParticipant {
  close(): Promise<void>
}

const participants = new Set<ShutdownParticipant>()
const signals = ['SIGTERM', 'SIGINT'] as const

/** One handler per process whatever the number of managers: close them all, then exit 0. */
async function onSignal(): Promise<void> {
  uninstall()
  await Promise.allSettled([...participants].map((participant) => participant.close()))
  process.exit(0)
}

function uninstall(): void {
  for (const signal of signals) process.off(signal, onSignal)
}

export function closeOnSignals(participant: ShutdownParticipant): void {
  if (participants.size === 0) for (const signal of signals) process.on(signal, onSignal)
  participants.add(participant)
}

export function stopClosingOnSignals(participant: ShutdownParticipant): void {
  if (participants.delete(participant) && participants.size === 0) uninstall()
}
