/**
 * A request's wire datums as gyre's, refused by name before any work: each decoded
 * strictly with the wire's Datum Schema, aligned (`Alignment.ts`) and checked by the one
 * Datum validator (`Datum.checkAll`: lengths, vocabulary, float32 range, the inputs each
 * loss reads), the first bad one named in wire names and positions
 * (`forward_backward_input.data[2].loss_fn_inputs.advantages.data[3] = 1e+300 overflows float32`).
 * The Tinker wire and the Loops data plane both check their batches with it.
 *
 * Datums are handled one at a time, and every few milliseconds the event loop gets a turn
 * (`yieldToOthers`): a batch of tens of megabytes takes seconds to check, and a health
 * check or a poll must not wait for all of it.
 *
 * @since 0.1.0
 */
import { Effect, Result } from "effect"
import type { Datum, LossFn } from "../../../contract/Contract.ts"
import * as DatumIssue from "../../../contract/DatumIssue.ts"
import { yieldToOthers } from "../../../platform/HttpServer.ts"
import { checkAll } from "../../../vocabulary/Datum.ts"
import * as Alignment from "../wire/Alignment.ts"
import { decode } from "../wire/Decode.ts"
import * as Wire from "../wire/Wire.ts"

/** What a batch is checked against. @since 0.1.0 @category models */
export interface Limits {
  /** token ids must be below it (unchecked when absent) */
  readonly vocabSize?: number | undefined
  /** the longest sequence accepted */
  readonly maxLength: number
  /** the most datums in one request */
  readonly maxDatums: number
}

/** A refused batch: what to say, and the validator's issue when it found one. @since 0.1.0 @category models */
export interface Refused {
  readonly message: string
  readonly issue?: DatumIssue.DatumIssue | undefined
}

/** gyre's field names on the wire. */
const WIRE_FIELDS: Readonly<Record<string, string>> = { modelInput: "model_input", lossFnInputs: "loss_fn_inputs" }

/** The names of a request's datums on the wire, under `at` (`forward_backward_input`): a tensor position is `.data[j]`. */
const wireNames = (at: string): DatumIssue.Names => ({ data: `${at}.data`, fields: WIRE_FIELDS, element: (j) => `.data[${j}]` })

/**
 * A `checkAll` issue (gyre's positions) at the wire's positions: position i of a per-token
 * input is wire position i - 1 (`Alignment.ts`); `model_input` keeps gyre's positions
 * (it is the sequence without its last token).
 * @since 0.1.0 @category combinators
 */
export const wireIssue = (issue: DatumIssue.DatumIssue): DatumIssue.DatumIssue =>
  issue.field[0] === "lossFnInputs" && issue.position !== undefined ? { ...issue, position: issue.position - 1 } : issue

/** A `checkAll` issue as the refusal's text, in wire names and positions: `<at>.data[2].loss_fn_inputs.advantages.data[2]`. @since 0.1.0 @category combinators */
export const wireDetail = (issue: DatumIssue.DatumIssue, at: string): string => DatumIssue.render(wireIssue(issue), wireNames(at))

/** How long datums are handled before other requests get a turn. */
const SLICE_MILLIS = 10

/** One wire datum as gyre's, checked; a refusal names it as datum `i` of `at`. */
const checkedDatum = (at: string, i: number, raw: unknown, lossFn: LossFn, limits: Limits): Result.Result<Datum, Refused> => {
  const named = `${at}.data[${i}]`
  const decoded = decode(Wire.Datum, named, { strict: true })(raw)
  if (Result.isFailure(decoded)) return Result.fail({ message: decoded.failure })
  const aligned = Alignment.datumFromWire(decoded.success, lossFn, named)
  if (Result.isFailure(aligned)) return Result.fail({ message: aligned.failure })
  const found = checkAll([aligned.success], lossFn, { ...(limits.vocabSize !== undefined ? { vocabSize: limits.vocabSize } : {}), maxLength: limits.maxLength })
  if (found === undefined) return Result.succeed(aligned.success)
  const issue = { ...found, datum: i }
  return Result.fail({ message: wireDetail(issue, at), issue })
}

/**
 * The datums `raw` (the request's `<at>.data`, as sent) in gyre's convention, checked, or
 * the refusal naming the first bad one.
 * @since 0.1.0 @category combinators
 */
export const checkedDatums = (at: string, raw: unknown, lossFn: LossFn, limits: Limits): Effect.Effect<ReadonlyArray<Datum>, Refused> =>
  Effect.gen(function* () {
    if (!Array.isArray(raw)) return yield* Effect.fail<Refused>({ message: `${at}.data: expected an array of datums` })
    if (raw.length === 0) return yield* Effect.fail<Refused>({ message: `${at}.data is empty: send at least one datum` })
    if (raw.length > limits.maxDatums) return yield* Effect.fail<Refused>({ message: `${at}.data has ${raw.length} datums; at most ${limits.maxDatums} per request` })
    const out: Array<Datum> = []
    let sliceStart = performance.now()
    for (const [i, datum] of raw.entries()) {
      const checked = checkedDatum(at, i, datum, lossFn, limits)
      if (Result.isFailure(checked)) return yield* Effect.fail(checked.failure)
      out.push(checked.success)
      if (performance.now() - sliceStart > SLICE_MILLIS) {
        yield* yieldToOthers
        sliceStart = performance.now()
      }
    }
    return out
  })
