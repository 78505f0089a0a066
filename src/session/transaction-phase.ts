/**
 * Where a transaction-mode session stands (PgBouncer keeps the like as CL_* states):
 * - idle: it holds no server connection (between transactions);
 * - waiting: it waits for one from the pool, its messages queued;
 * - active: it holds one (relayed in JavaScript, or kept and relayed natively);
 * - settling: it gave one back whose settings are read back before the next is taken;
 * - closed: the session is over.
 */
export type TransactionPhase = 'idle' | 'waiting' | 'active' | 'settling' | 'closed'

/** The phases each phase may move to; nothing leaves closed. */
const NEXT: Readonly<Record<TransactionPhase, readonly TransactionPhase[]>> = {
  idle: ['waiting', 'active', 'closed'],
  waiting: ['active', 'closed'],
  active: ['idle', 'settling', 'closed'],
  settling: ['idle', 'waiting', 'closed'],
  closed: [],
}

/** The phase after `from` moves to `to`; an illegal move is a bug, refused with an error. */
export function nextPhase(from: TransactionPhase, to: TransactionPhase): TransactionPhase {
  if (!NEXT[from].includes(to))
    throw new Error(`transaction session: no move from ${from} to ${to}`)
  return to
}
