/**
 * DPO's reference policy when the run starts from another run's weights (`--dpo
 * --init-from`): those weights, frozen. Rafailov et al. take the SFT model as DPO's
 * reference, the policy DPO starts from; the backend's own `Reference` is the base model
 * with no adapter, which would measure the SFT run's changes as DPO's own (step 1's loss
 * would not be log 2). A run without `--init-from` starts from the base model, its
 * backend's `Reference` already.
 *
 * @since 0.1.0
 */
import { Effect, Layer } from "effect"
import { Reference } from "../services/Reference.ts"
import { RunError } from "../run/Settings.ts"
import * as Teacher from "./Teacher.ts"

/**
 * The weights `initFrom` names (a run folder, `runs/<name>/step-N` or a state file of an
 * embedded run), frozen in a model of their own, as the run's `Reference`. On a remote
 * backend it fails, saying why and what to do: the service's reference is its base model.
 * @since 0.1.0 @category layers
 */
export const layer = (initFrom: string, stateDir: string, backend: string) =>
  Layer.effect(
    Reference,
    Effect.gen(function* () {
      if (backend !== "embedded") {
        return yield* new RunError({
          reason: "Settings",
          message: `--dpo --init-from ${initFrom} on --backend ${backend}: DPO's reference must be the policy it starts from, but this backend's reference is its base model. ` +
            "Run DPO from --init-from on the embedded backend, or without --init-from (the reference is then the base model, the policy it starts from)",
        })
      }
      const spec = yield* Teacher.resolve(initFrom, 1, "--init-from")
      const { sampler, version } = yield* Teacher.frozen(spec, stateDir, "--init-from")
      yield* Effect.logInfo(`DPO's reference: the policy of ${initFrom} (--init-from), frozen`)
      return Reference.of({
        logprobs: (inputs) => Effect.forEach(inputs, (input) => sampler.computeLogprobs(input, { minPolicyVersion: version })),
        check: Effect.void,
      })
    }),
  )
