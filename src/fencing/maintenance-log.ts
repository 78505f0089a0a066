import type { LevelLogger } from '../log.js'
import type { StatementRewriter } from '../rewrite/statement-rewriter.js'
import { maintenanceNeedle } from '../rewrite/statement-marker.js'
import { Frontend, TransactionStatus } from '../wire/protocol.js'
import type { RequestProgress } from '../relay/request-progress.js'
import { encodingOf } from '../relay/statement-interceptor.js'

const value = String.raw`(?:'?(?:off|false|no|0)'?|default)`
const end = String.raw`\s*;?\s*$`
/** Single statements that certainly turn maintenance off at session level, run outside a block. */
const turnsOff = new RegExp(
  [
    String.raw`^\s*reset\s+(?:all|pgfence\.maintenance)${end}`,
    String.raw`^\s*discard\s+all${end}`,
    String.raw`^\s*set\s+(?:session\s+)?pgfence\.maintenance\s*(?:=|to)\s*${value}${end}`,
    String.raw`^\s*select\s+(?:pg_catalog\.)?set_config\s*\(\s*'pgfence\.maintenance'\s*,\s*'(?:off|false|no|0)?'\s*,\s*false\s*\)${end}`,
  ].join('|'),
  'i',
)
/** Turns it on until the transaction ends, at the most. */
const setLocal = /^\s*set\s+local\s+pgfence\.maintenance\b[^;]*;?\s*$/i

/** The messages that run statements: those observe() logs. */
export const observedTypes = new Set<number>([Frontend.Query, Frontend.Parse, Frontend.Bind])

/** Holds the setting's name in any letter case (the name has no `=`: a match is in one part). */
const mentionsSetting = (text: string): boolean => text.toLowerCase().includes(maintenanceNeedle)

/** A client's startup parameters turn maintenance on (`options=-c pgfence.maintenance=on`). */
export function startsInMaintenance(params: Map<string, string>): boolean {
  // Keys and values apart: iterating entries makes an array per parameter at every login.
  for (const name of params.keys()) if (mentionsSetting(name)) return true
  for (const value of params.values()) if (mentionsSetting(value)) return true
  return false
}

/**
 * Logs (info) each statement a session relays while `pgfence.maintenance` may be on for it, and
 * the statements that switch it. Without reading the setting back, it errs on the side of
 * logging: on from any statement that names the setting until the session has certainly turned
 * it off (RESET, `= off`, DISCARD ALL sent on its own outside a transaction), or, for SET LOCAL,
 * until that transaction has certainly ended. While on, the session must see every Query and
 * Parse (the native relay hands them all over) and every Bind of a named statement, and its
 * statements are rewritten by the rewriter for maintenance (rewriterFor).
 */
export class MaintenanceLog {
  private session: boolean
  private local = false

  constructor(
    private readonly logger: LevelLogger,
    startupParams: Map<string, string> | undefined,
  ) {
    this.session = startupParams !== undefined && startsInMaintenance(startupParams)
  }

  /** Whether every statement must be shown to observe(). */
  get on(): boolean {
    return this.session || this.local
  }

  /**
   * The rewriter for the session's next statement: while maintenance may be on, the one that
   * leaves fence column writes to the fence trigger (which reads the setting itself).
   */
  rewriterFor(rewriter: StatementRewriter): StatementRewriter {
    return this.on ? (rewriter.underMaintenance ?? rewriter) : rewriter
  }

  /**
   * One whole Query, Parse or Bind on its way upstream; `idle`: every request before it was
   * answered, outside a transaction block.
   */
  observe(message: Buffer, idle: boolean): void {
    const type = message[0]
    if (idle) this.local = false
    if (type === Frontend.Bind) return this.observeBind(message)
    const text = statementText(message)
    const names = text.toLowerCase().includes(maintenanceNeedle)
    if (!names && !this.on) return
    this.logger.info({ statement: text }, 'pgfence.maintenance statement')
    if (type === Frontend.Query && idle && turnsOff.test(text)) {
      this.session = false
    } else if (names && setLocal.test(text)) {
      this.local = true
    } else if (names) {
      this.session = true
    }
  }

  /** Bind: portal\0 statement\0 ... — a named statement's text was logged when it was parsed. */
  private observeBind(message: Buffer): void {
    if (!this.on) return
    const portalEnd = message.indexOf(0, 5)
    const nameEnd = portalEnd < 0 ? -1 : message.indexOf(0, portalEnd + 1)
    if (nameEnd <= portalEnd + 1) return
    const prepared = message.toString(encodingOf(message), portalEnd + 1, nameEnd)
    this.logger.info({ prepared }, 'pgfence.maintenance statement')
  }
}

/** Whether every request before `message` was answered outside a transaction (it counted). */
export function idleBefore(
  message: Buffer,
  progress: Pick<RequestProgress, 'outstanding' | 'status'>,
): boolean {
  const before = progress.outstanding - (message[0] === Frontend.Query ? 1 : 0)
  return before <= 0 && progress.status === TransactionStatus.Idle
}

/** The SQL text of a Query (text\0) or Parse (name\0 text\0 ...). */
function statementText(message: Buffer): string {
  const start = message[0] === Frontend.Parse ? message.indexOf(0, 5) + 1 : 5
  const end = message.indexOf(0, start)
  const bytes = message.subarray(start, end < 0 ? message.length : end)
  return bytes.toString(encodingOf(bytes))
}
