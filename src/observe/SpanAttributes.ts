/**
 * A tracer that gives each span the step and phase of the run it belongs to
 * (`run/RunSpans.ts`), so that a collector can group the thousands of spans of a run by
 * step and phase. A span takes both from its parent; a span that begins a phase
 * (`RunSpans.PHASES`) names its own. The step the runner set around the span's work
 * (`RunSpans.atStep`) is applied after, and wins.
 *
 * @since 0.1.0
 */
import { Option, Tracer } from "effect"
import { PHASE, PHASES, STEP } from "../run/RunSpans.ts"

/** The attributes a span inherits from its parent. */
const INHERITED = [STEP, PHASE] as const

/**
 * `tracer`, with each span's step and phase filled in.
 * @since 0.1.0 @category combinators
 */
export const withRunAttributes = (tracer: Tracer.Tracer): Tracer.Tracer =>
  Tracer.make({
    span(options) {
      const span = tracer.span(options)
      const parent = Option.getOrUndefined(options.parent)
      if (parent?._tag === "Span") {
        for (const key of INHERITED) {
          const value = parent.attributes.get(key)
          if (value !== undefined) span.attribute(key, value)
        }
      }
      const phase = PHASES[options.name]
      if (phase !== undefined) span.attribute(PHASE, phase)
      return span
    },
    ...(tracer.context !== undefined ? { context: tracer.context } : {}),
  })
