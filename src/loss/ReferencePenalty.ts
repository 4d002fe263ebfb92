/**
 * The KL penalty against the `Reference` in context: checking before a run that it can be
 * served (`ensure`), and folding it into a step's advantages (`penalize`). Separate from
 * the service itself (`services/Reference.ts`), which the backends provide and which knows
 * nothing of losses.
 *
 * @since 0.1.0
 */
import { Effect, Result } from "effect"
import { current } from "../services/Reference.ts"
import { BackendError, type Datum } from "../contract/Contract.ts"
import * as KlPenalty from "./KlPenalty.ts"

/**
 * Before a run: with a KL coefficient > 0, checks that the backend can give reference
 * log-probs, and fails with a message naming the flag and saying why when it cannot.
 * With 0 it does nothing.
 * @since 0.1.0 @category combinators
 */
export const ensure = Effect.fn("Reference.ensure")(function* (coef: number, flag = "--kl-coef") {
  const teacher = flag === "--teacher"
  const bad = KlPenalty.checkCoef(coef, flag)
  if (bad) return yield* new BackendError({ reason: "InvalidInput", operation: "Reference.ensure", message: bad })
  if (coef === 0) return
  const reference = yield* current
  yield* reference.check.pipe(
    Effect.mapError(
      (e) =>
        new BackendError({
          reason: e.reason,
          operation: e.operation,
          message: teacher
            ? `--teacher needs the teacher's log-probs of the sampled tokens, but ${e.message}. Name a model the backend can score with, or a model or run on this machine`
            : `${flag} ${coef} needs the base model's log-probs of the sampled tokens, but ${e.message}. Use a backend that serves the base model, or ${flag} 0`,
        }),
    ),
  )
})

/**
 * Fetches the reference log-probs of a step's Datums (from the Reference in context, if
 * any: see `current`) and folds the KL penalty into their advantages (`KlPenalty.apply`:
 * tinker-cookbook's `kl_penalty_coef` rule). With `coef` 0 it returns the Datums as they
 * are and asks nothing of the backend.
 * @since 0.1.0 @category combinators
 */
export const penalize = Effect.fn("Reference.penalize")(function* (
  data: ReadonlyArray<Datum>,
  coef: number,
  options: { readonly masks?: ReadonlyArray<ReadonlyArray<number>> | undefined; readonly centred?: boolean | undefined } = {},
) {
  const bad = KlPenalty.checkCoef(coef, "coef")
  if (bad) return yield* new BackendError({ reason: "InvalidInput", operation: "Reference.penalize", message: bad })
  if (coef === 0 || data.length === 0) return { data: [...data], metrics: {} } satisfies KlPenalty.KlPenaltyResult
  const reference = yield* current
  const logprobs = yield* reference.logprobs(data.map((d) => d.modelInput))
  const out = KlPenalty.apply({ data, reference: logprobs, coef, masks: options.masks, centred: options.centred })
  if (Result.isFailure(out)) return yield* new BackendError({ reason: "Internal", operation: "Reference.penalize", message: out.failure })
  return out.success
})
