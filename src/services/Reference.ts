/**
 * The Reference service: log-probs of token sequences under the reference policy, the
 * base model with no adapter, for the KL penalty (`KlPenalty.ts`).
 *
 * - embedded backend (`Local.layer`, in-process or on worker threads): the frozen base
 *   weights with the adapter off, computed like the sampler's `computeLogprobs`;
 * - HTTP backend: a sampling session of the base model (`create_sampling_session` with
 *   `base_model`) and `compute_logprobs` on it.
 *
 * `check` is cheap and says whether the backend can give reference log-probs at all: a
 * run with a KL coefficient > 0 calls it before its first step, so that a server that
 * refuses base-model sampling stops the run at once, saying why.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Option, Result } from "effect"
import { BackendError, type Datum, type ModelInput } from "../vocabulary/Contract.ts"
import * as KlPenalty from "../loss/KlPenalty.ts"

/** @since 0.1.0 @category models */
export interface ReferenceShape {
  /** per input, log p_ref(x_i | x_<i) for every position (position 0 is 0) */
  readonly logprobs: (inputs: ReadonlyArray<ModelInput>) => Effect.Effect<Array<Array<number>>, BackendError>
  /** succeeds when `logprobs` can be served; else fails saying why (and what to do) */
  readonly check: Effect.Effect<void, BackendError>
}

/** @since 0.1.0 @category services */
export class Reference extends Context.Service<Reference, ReferenceShape>()("gyre/Reference") {}

/**
 * A Reference that cannot serve: `check` and `logprobs` fail with `why`.
 * @since 0.1.0 @category constructors
 */
export const unavailable = (why: string, operation = "reference"): ReferenceShape => {
  const error = new BackendError({ reason: "Unavailable", operation, message: why })
  return { logprobs: () => Effect.fail(error), check: Effect.fail(error) }
}

/** @since 0.1.0 @category layers */
export const layerUnavailable = (why: string): Layer.Layer<Reference> => Layer.succeed(Reference, unavailable(why))

const NONE = "this backend provides no Reference service (the embedded and HTTP backends do)"

/**
 * The Reference in context, or, when there is none, one whose calls fail saying so. It
 * requires nothing: a program that uses it only with a KL coefficient > 0 runs on
 * backends without a Reference as long as the coefficient is 0.
 * @since 0.1.0 @category accessors
 */
export const current: Effect.Effect<ReferenceShape> = Effect.map(Effect.serviceOption(Reference), Option.getOrElse(() => unavailable(NONE)))

/**
 * Before a run: with a KL coefficient > 0, checks that the backend can give reference
 * log-probs, and fails with a message naming the flag and saying why when it cannot.
 * With 0 it does nothing.
 * @since 0.1.0 @category combinators
 */
export const ensure = Effect.fn("Reference.ensure")(function* (coef: number, flag = "--kl-coef") {
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
          message: `${flag} ${coef} needs the base model's log-probs of the sampled tokens, but ${e.message}. Use a backend that serves the base model, or ${flag} 0`,
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
  options: { readonly masks?: ReadonlyArray<ReadonlyArray<number>> | undefined } = {},
) {
  const bad = KlPenalty.checkCoef(coef, "coef")
  if (bad) return yield* new BackendError({ reason: "InvalidInput", operation: "Reference.penalize", message: bad })
  if (coef === 0 || data.length === 0) return { data: [...data], metrics: {} } satisfies KlPenalty.KlPenaltyResult
  const reference = yield* current
  const logprobs = yield* reference.logprobs(data.map((d) => d.modelInput))
  const out = KlPenalty.apply({ data, reference: logprobs, coef, masks: options.masks })
  if (Result.isFailure(out)) return yield* new BackendError({ reason: "Internal", operation: "Reference.penalize", message: out.failure })
  return out.success
})
