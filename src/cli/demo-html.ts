import { roundStory, type RoundResult } from './demo-rounds.js'
import type { RoundName } from './demo-worker.js'
import { lanes, type Lane, type TimelineEvent, type WorkerLane } from './demo-timeline.js'

/** What the page is drawn from: the run's store, its rounds and any round it skipped. */
export interface PlayedDemo {
  store: string
  rounds: RoundResult[]
  /** Rounds that could not be played, and why. */
  skipped: Array<{ name: RoundName; reason: string }>
}

// The drawing's geometry, in SVG units (the page scales it to the window's width).
const width = 1100
const laneLeft = 130
const laneRight = width - 210
const axisY = 26
const laneTop = 40
const laneHeight = 64
const height = laneTop + lanes.length * laneHeight + 8

const colours = {
  'worker 1': '#2f6fb3',
  'worker 2': '#c0661a',
  committed: '#1a7f37',
  corrupted: '#cf222e',
  refused: '#8250df',
} as const

/** Text for XML: the page is well-formed XHTML as well as HTML. */
function escape(text: string): string {
  return text
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
}

/** `name="value"` pairs, escaped. */
function attrs(values: Record<string, string | number | undefined>): string {
  return Object.entries(values)
    .filter(([, value]) => value !== undefined)
    .map(([name, value]) => `${name}="${escape(String(value))}"`)
    .join(' ')
}

const laneY = (lane: Lane) => laneTop + lanes.indexOf(lane) * laneHeight

function label(x: number, y: number, text: string, className: string, anchor = 'start'): string {
  return `<text ${attrs({ x, y, class: className, 'text-anchor': anchor })}>${escape(text)}</text>`
}

/** A label beside a mark at `x`: on its right, or on its left near the right edge. */
function beside(x: number, y: number, text: string, className: string): string {
  return x > laneRight - 300
    ? label(x - 10, y, text, className, 'end')
    : label(x + 10, y, text, className)
}

/** One event as an SVG group that carries what happened as data, and its line as a tooltip. */
function group(event: TimelineEvent, body: string): string {
  const data = {
    class: 'event',
    'data-kind': event.kind,
    'data-lane': event.lane,
    'data-at-ms': event.atMs,
    'data-token': 'token' in event ? (event.token ?? 'none') : undefined,
    'data-outcome': event.kind === 'write' ? event.outcome : undefined,
    'data-value': 'value' in event ? event.value : undefined,
    'data-holder': event.kind === 'expiry' ? event.holder : undefined,
    'data-end-ms': event.kind === 'pause' ? event.endMs : undefined,
  }
  return `<g ${attrs(data)}><title>${escape(event.text)}</title>${body}</g>`
}

const outcomeColour = (outcome: string) =>
  outcome === 'committed'
    ? colours.committed
    : outcome === 'corrupted'
      ? colours.corrupted
      : colours.refused

const outcomeText = (outcome: string) =>
  outcome === 'corrupted'
    ? 'committed: CORRUPTED'
    : outcome === 'committed'
      ? 'committed'
      : `${outcome}, refused`

/** The SVG of one round: a lane per worker, the lock service and the database, along time. */
function roundSvg(round: RoundResult): string {
  // Time from a little before the round's first event: the workers' start is left out.
  const firstMs = Math.min(...round.events.map((event) => event.atMs))
  const lastMs = Math.max(
    ...round.events.map((event) => (event.kind === 'pause' ? event.endMs : event.atMs)),
  )
  const stepMs = lastMs - firstMs > 6000 ? 1000 : 500
  const originMs = Math.max(0, Math.floor((firstMs - 200) / stepMs) * stepMs)
  const spanMs = Math.ceil(((lastMs - originMs) * 1.04 + 1) / stepMs) * stepMs
  const x = (atMs: number) => laneLeft + ((atMs - originMs) / spanMs) * (laneRight - laneLeft)
  const parts: string[] = []

  lanes.forEach((lane, i) => {
    const y = laneY(lane)
    parts.push(
      `<rect ${attrs({ x: 0, y, width, height: laneHeight, class: i % 2 ? 'lane odd' : 'lane' })}/>`,
      label(10, y + laneHeight / 2 + 5, lane, 'lane-name'),
    )
  })
  for (let ms = 0; ms <= spanMs; ms += stepMs) {
    const at = x(originMs + ms)
    parts.push(
      `<line ${attrs({ x1: at, y1: axisY + 4, x2: at, y2: height - 8, class: 'tick' })}/>`,
      label(at, axisY, `${(originMs + ms) / 1000} s`, 'tick-label', 'middle'),
    )
  }

  // The pauses first, as bands behind everything else.
  for (const event of round.events) {
    if (event.kind !== 'pause') continue
    const y = laneTop
    parts.push(
      group(
        event,
        `<rect ${attrs({ x: x(event.atMs), y, width: x(event.endMs) - x(event.atMs), height: lanes.length * laneHeight, class: 'pause' })}/>` +
          label(x(event.atMs) + 6, laneY(event.lane) + 15, event.text, 'pause-label'),
      ),
    )
  }

  // Each lease as a bar on its holder's lane, from its grant to its expiry or the round's end.
  const expiryOf = (holder: WorkerLane) =>
    round.events.find((event) => event.kind === 'expiry' && event.holder === holder)?.atMs
  let serviceRow = 0
  let writeRow = 0
  let lastWriteX = -Infinity
  for (const event of round.events) {
    const y = laneY(event.lane)
    switch (event.kind) {
      case 'grant': {
        const end = expiryOf(event.lane) ?? originMs + spanMs
        const token = event.token === null ? 'no token' : `token ${event.token}`
        parts.push(
          group(
            event,
            `<rect ${attrs({ x: x(event.atMs), y: y + 38, width: Math.max(x(end) - x(event.atMs), 2), height: 14, rx: 3, fill: colours[event.lane], class: 'lease' })}/>` +
              `<circle ${attrs({ cx: x(event.atMs), cy: y + 45, r: 6, fill: colours[event.lane] })}/>` +
              beside(x(event.atMs), y + 32, `lease granted, ${token}`, 'grant-label'),
          ),
        )
        break
      }
      case 'expiry':
        parts.push(
          group(
            event,
            `<path ${attrs({ d: `M${x(event.atMs) - 6},${y + 26} l12,12 m0,-12 l-12,12`, class: 'expiry' })}/>` +
              `<line ${attrs({ x1: x(event.atMs), y1: laneY(event.holder) + 52, x2: x(event.atMs), y2: y + 26, class: 'expiry-link' })}/>` +
              beside(x(event.atMs), y + 37, `${event.holder}'s lease expires`, 'expiry-label'),
          ),
        )
        break
      case 'service': {
        const top = y + 16 + (serviceRow++ % 3) * 17
        parts.push(
          group(
            event,
            `<rect ${attrs({ x: x(event.atMs) - 4, y: top - 8, width: 8, height: 8, transform: `rotate(45 ${x(event.atMs)} ${top - 4})`, class: 'service' })}/>` +
              beside(x(event.atMs), top, event.text, 'service-label'),
          ),
        )
        break
      }
      case 'write': {
        // Writes close together in time are spread apart so that each stays readable.
        const at = Math.max(x(event.atMs), lastWriteX + 16)
        lastWriteX = at
        const colour = outcomeColour(event.outcome)
        const token = event.token === null ? 'no token' : `token ${event.token}`
        const rowY = laneY('database') + 24 + (writeRow++ % 2) * 24
        // Its label to the left, where the database lane is empty until the writes.
        parts.push(
          group(
            event,
            `<line ${attrs({ x1: at, y1: y + 45, x2: at, y2: rowY - 4, stroke: colour, class: 'write' })}/>` +
              `<circle ${attrs({ cx: at, cy: rowY - 4, r: 5, fill: colour })}/>` +
              `<text ${attrs({ x: at - 9, y: rowY, class: 'write-label', fill: colour, 'text-anchor': 'end' })}>${escape(`${event.value}, ${token}: ${outcomeText(event.outcome)}`)}</text>`,
          ),
        )
        break
      }
      case 'final':
        parts.push(
          group(
            event,
            `<rect ${attrs({ x: laneRight + 24, y: y + 14, width: width - laneRight - 30, height: 36, rx: 5, class: round.corrupted ? 'final corrupted' : 'final correct' })}/>` +
              label(laneRight + 32, y + 37, `final: ${event.value}`, 'final-label'),
          ),
        )
        break
      case 'pause':
        break
    }
  }
  return `<svg xmlns="http://www.w3.org/2000/svg" ${attrs({ viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': `round ${round.name}` })}>${parts.join('')}</svg>`
}

function roundSection(round: RoundResult): string {
  const story = roundStory[round.name]
  const verdict = round.corrupted
    ? `CORRUPTED: the stale write overwrote B, the row ends as ${round.finalValue}`
    : `correct: the stale write got ${round.staleWriteCode}, the row ends as ${round.finalValue}`
  return `<section ${attrs({ class: 'round', 'data-round': round.name, 'data-corrupted': String(round.corrupted) })}>
<h2>round ${escape(round.name)} <span class="story">${escape(story.lock)}, writes to ${escape(story.path)}; lease TTL ${round.ttlMs / 1000} s</span></h2>
<p ${attrs({ class: round.corrupted ? 'verdict corrupted' : 'verdict correct' })}>${escape(verdict)}</p>
${roundSvg(round)}
</section>`
}

const style = `
body { font: 15px/1.4 system-ui, sans-serif; color: #1f2328; background: #fff; margin: 24px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 0 0 2px; }
.story { font-weight: normal; color: #57606a; }
section.round { margin: 0 0 22px; break-inside: avoid; page-break-inside: avoid; }
.verdict { margin: 0 0 4px; font-weight: 600; }
.verdict.correct { color: #1a7f37; }
.verdict.corrupted { color: #cf222e; }
svg { width: 100%; height: auto; display: block; border: 1px solid #d0d7de; border-radius: 6px; }
svg text { font-family: system-ui, sans-serif; font-size: 13px; }
.lane { fill: #ffffff; }
.lane.odd { fill: #f6f8fa; }
.lane-name { font-weight: 600; font-size: 14px; fill: #1f2328; }
.tick { stroke: #d8dee4; stroke-width: 1; }
.tick-label { fill: #57606a; font-size: 12px; }
.pause { fill: #8c959f; fill-opacity: 0.18; stroke: #8c959f; stroke-dasharray: 4 3; }
.pause-label { fill: #424a53; font-style: italic; }
.lease { fill-opacity: 0.35; }
.grant-label { fill: #1f2328; }
.expiry { stroke: #cf222e; stroke-width: 2.5; fill: none; }
.expiry-link { stroke: #cf222e; stroke-width: 1; stroke-dasharray: 3 3; }
.expiry-label { fill: #cf222e; }
.service { fill: #57606a; }
.service-label { fill: #424a53; }
.write { stroke-width: 2; }
.write-label { font-weight: 600; }
.final { stroke-width: 2; }
.final.correct { fill: #dafbe1; stroke: #1a7f37; }
.final.corrupted { fill: #ffebe9; stroke: #cf222e; }
.final-label { font-weight: 700; font-size: 15px; }
.skipped { color: #57606a; }
@media print { body { margin: 0; } }
`

/** The whole page: self-contained (inline style and SVG, nothing fetched), printable. */
export function timelinePage(demo: PlayedDemo): string {
  const skipped = demo.skipped
    .map(
      (round) =>
        `<p ${attrs({ class: 'skipped', 'data-round': round.name })}>round ${escape(round.name)} skipped: ${escape(round.reason)}</p>`,
    )
    .join('\n')
  return `<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" lang="en">
<head>
<meta charset="utf-8"/>
<title>pgfence demo: timeline</title>
<style>${style}</style>
</head>
<body>
<h1>pgfence demo</h1>
<p>Leases in ${escape(demo.store)}. Each round: worker 1 holds the lease on invoice 99, worker 2 gets the same lease, both write; a lane per worker, the lock service and the database, time from the round's start. Hover a mark for its line of the run.</p>
${demo.rounds.map(roundSection).join('\n')}
${skipped}
</body>
</html>
`
}
