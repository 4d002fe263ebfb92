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
 * run with a KL coefficient > 0 calls it before its first step (`loss/ReferencePenalty.ts`'s
 * `ensure`), so that a server that refuses base-model sampling stops the run at once,
 * saying why.
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer, Option } from "effect"
import { BackendError, type ModelInput } from "../contract/Contract.ts"

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
