/**
 * DPO steps (`--dpo`): each step's problems become preference pairs (the env's
 * `preference(problem)`: chosen, then rejected, each after the problem's prompt), trained
 * with `CustomLoss.dpo` against the reference policy (the base model, as for the KL
 * penalty). Held-out evaluations add `test/dpo/accuracy`: the fraction of held-out
 * problems whose chosen completion the policy gives the higher log-prob.
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
 * The fraction of `groups`' pairs whose chosen completion the policy (the trainer's
 * current weights) gives the higher log-prob.
 * @since 0.1.0 @category evaluation
 */
export const accuracy = Effect.fnUntraced(function* (groups: ReadonlyArray<Group>, step: number) {
  const data = yield* pairDatums(groups, step)
  if (data.length === 0) return 0
  const out = yield* (yield* Trainer).forward(data, "cross_entropy").pipe(Effect.mapError((e) => new RunError({ reason: "Backend", step, message: `forward (${e.reason}): ${e.message}` })))
  const sums = completionSums(data, out.lossFnOutputs.map((o) => o.logprobs))
  let preferred = 0
  for (let p = 0; p + 1 < sums.length; p += 2) if (sums[p]! > sums[p + 1]!) preferred++
  return preferred / (sums.length / 2)
})

/**
 * One DPO step's gradient: the pairs' reference log-probs, then `CustomLoss.dpo`.
 * @since 0.1.0 @category training
 */
export const backward = Effect.fnUntraced(function* (data: ReadonlyArray<DatumT>, beta: number, step: number, microBatch: number) {
  const reference = yield* (yield* Reference.current).logprobs(data.map((d) => d.modelInput)).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", step, message: `--dpo needs the reference policy's log-probs (${e.reason}): ${e.message}` })),
  )
  return yield* CustomLoss.forwardBackward(data, CustomLoss.dpo(beta, reference), { chunk: microBatch }).pipe(
    Effect.mapError((e) => new RunError({ reason: "Backend", step, message: e.message })),
  )
})
