/**
 * DPO steps (`--dpo`): each step's problems become preference pairs (the env's
 * `preference(problem)`: chosen, then rejected, each after the problem's prompt), trained
 * with `CustomLoss.dpo` against the reference policy: the policy the run starts from (the
 * base model, or the weights of `--init-from`, frozen: Rafailov et al. take the SFT model
 * as the reference), so step 1's loss is log 2. Held-out evaluations add
 * `test/dpo/accuracy`, DPO's reward accuracy: the fraction of held-out pairs whose implicit
 * reward margin `beta·[(log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))]`
 * is above 0.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { Datum as DatumT } from "../contract/Contract.ts"
import * as CustomLoss from "../vocabulary/CustomLoss.ts"
import * as Datum from "../vocabulary/Datum.ts"
import * as Reference from "../services/Reference.ts"
import { Tokenizer } from "../services/Tokenizer.ts"
import { Trainer } from "../services/Trainer.ts"
import type { Group } from "./Collect.ts"
import { fail, RunError } from "./Settings.ts"

/**
 * The pairs of `groups`' problems, chosen then rejected, in the layout of `Datum.sft` (the
 * prompt's targets -100, the completion ended by EOS).
 * @since 0.1.0 @category training
 */
export const pairDatums = Effect.fnUntraced(function* (groups: ReadonlyArray<Group>, step: number) {
  const tokenizer = yield* Tokenizer
  const data: Array<DatumT> = []
  for (const g of groups) {
    const preference = g.task.envDef.preference
    if (preference === undefined) {
      return yield* new RunError({ reason: "Env", step, message: `--dpo needs env ${g.task.envDef.name} to define preference(problem), its { chosen, rejected } completions` })
    }
    const pair = preference(g.task.problem)
    for (const text of [pair.chosen, pair.rejected]) {
      const completion = yield* tokenizer.encode(text).pipe(Effect.mapError(fail("Env", step)))
      data.push(Datum.sft({ prompt: g.promptTokens, completion: [...completion, tokenizer.eos] }))
    }
  }
  return data
})

/** The summed completion log-prob of each datum (positions whose target is not -100). */
const completionSums = (data: ReadonlyArray<DatumT>, logprobs: ReadonlyArray<ReadonlyArray<number>>) =>
  data.map((d, k) => {
    const target = d.lossFnInputs["target_tokens"]!.data
    return logprobs[k]!.reduce((s, lp, t) => (t > 0 && target[t] !== -100 ? s + lp : s), 0)
  })

/**
 * A margin at or below this counts as no preference: the policy and the reference compute
 * the same weights' log-probs on two paths, which agree only to float32 rounding.
 */
const MARGIN_EPSILON = 1e-5

/**
 * Each pair's implicit reward margin, `beta·[(c - c_ref) - (r - r_ref)]` with `c`, `r` the
 * summed completion log-probs of the chosen and rejected completions.
 * @since 0.1.0 @category evaluation
 */
export const margins = (beta: number, policy: ReadonlyArray<number>, reference: ReadonlyArray<number>): Array<number> => {
  const out: Array<number> = []
  for (let p = 0; p + 1 < policy.length; p += 2) out.push(beta * ((policy[p]! - reference[p]!) - (policy[p + 1]! - reference[p + 1]!)))
  return out
}

/**
 * DPO's reward accuracy on `groups`' pairs: the fraction whose implicit reward margin
 * (the policy, the trainer's current weights, against the reference) is above 0.
 * @since 0.1.0 @category evaluation
 */
export const accuracy = Effect.fnUntraced(function* (groups: ReadonlyArray<Group>, step: number, beta: number) {
  const data = yield* pairDatums(groups, step)
  if (data.length === 0) return 0
  const out = yield* (yield* Trainer).forward(data, "cross_entropy").pipe(Effect.mapError((e) => new RunError({ reason: "Backend", step, message: `forward (${e.reason}): ${e.message}` })))
  const reference = yield* referenceOf(data, step)
  const z = margins(beta, completionSums(data, out.lossFnOutputs.map((o) => o.logprobs)), completionSums(data, reference))
  return z.filter((m) => m > MARGIN_EPSILON * beta).length / z.length
})

/** The reference policy's log-probs of `data`. */
const referenceOf = (data: ReadonlyArray<DatumT>, step: number) =>
  Effect.flatMap(Reference.current, (r) => r.logprobs(data.map((d) => d.modelInput))).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", step, message: `--dpo needs the reference policy's log-probs (${e.reason}): ${e.message}` })),
  )

/**
 * One DPO step's gradient: the pairs' reference log-probs, then `CustomLoss.dpo`.
 * @since 0.1.0 @category training
 */
export const backward = Effect.fnUntraced(function* (data: ReadonlyArray<DatumT>, beta: number, step: number, microBatch: number) {
  const reference = yield* referenceOf(data, step)
  return yield* CustomLoss.forwardBackward(data, CustomLoss.dpo(beta, reference), { chunk: microBatch }).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", step, message: e.message })),
  )
})
