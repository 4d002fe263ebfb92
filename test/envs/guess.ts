/**
 * Guess the number: the hidden number (1..9) of game `id` lives in an `AnswerKey`
 * service, which the `check` tool asks once per episode (its state) to answer a guess
 * with higher, lower or yes; the last turn is the answer. Scored by a reward that asks
 * the answer key and a weight-0 judge that needs a second service. One `Tool.episode`,
 * no hand-written step; written against the public API, like a user's env.
 *
 *   Guess 1-9:[5]=higher;[7]=yes; 7
 */
import { Context, Effect, Layer, Schema } from "effect"
import { Env, Reward, Tool } from "gyre"

/** The hidden numbers. @since 0.1.0 */
export class AnswerKey extends Context.Service<AnswerKey, {
  readonly secret: (id: number) => Effect.Effect<number>
}>()("guess/AnswerKey") {
  /** game `id`'s number, from a hash of the id */
  static readonly layer = Layer.succeed(AnswerKey, AnswerKey.of({ secret: (id) => Effect.sync(() => 1 + (Env.hash32(`guess/${id}`) % 9)) }))
}

/** A judge that answers a question with a score ("1" or "0"), as a judge model would. */
export class Judge extends Context.Service<Judge, {
  readonly ask: (question: string) => Effect.Effect<string>
}>()("guess/Judge") {
  /** answers 1 when the answer is a number the checks said yes to */
  static readonly layer = Layer.succeed(Judge, Judge.of({
    ask: (question) =>
      Effect.sync(() => {
        const answer = /Answer: *(\d)/.exec(question)?.[1]
        return answer !== undefined && question.includes(`[${answer}]=yes;`) ? "1" : "0"
      }),
  }))
}

export const Game = Schema.Struct({ id: Schema.Int })
export type Game = typeof Game.Type

/** `[n]`: higher, lower or yes; the number comes from the answer key once per episode. */
export const check = Tool.make({
  name: "check",
  description: "is the hidden number higher than n, lower, or n?",
  args: Schema.Int.check(Schema.isBetween({ minimum: 1, maximum: 9 })),
  state: (game: Game) => AnswerKey.use((key) => key.secret(game.id)),
  run: (n, { state: secret }) => (n < secret ? "higher" : n > secret ? "lower" : "yes"),
})

/** 1 when the last turn is the hidden number. */
export const solved = Reward.make("solved", (r: Reward.Rollout<Game>) =>
  Effect.gen(function* () {
    const secret = yield* (yield* AnswerKey).secret(r.problem.id)
    return r.completion.trim() === String(secret) ? 1 : 0
  }))

/** The judge's view: does the answer follow from the checks? (a metric: weight 0) */
export const judged = Reward.make("judged", (r: Reward.Rollout<Game>) =>
  Effect.gen(function* () {
    const checks = (r.turns ?? []).map((t) => `${t.text}${t.observation ?? ""}`).join("")
    const reply = yield* (yield* Judge).ask(`Checks: ${checks} Answer: ${r.completion.trim()}. Does the answer follow? 1 or 0:`)
    return reply.trim() === "1" ? 1 : 0
  }))

export default Env.make({
  name: "guess",
  problem: Game,
  source: Env.seeded(({ random }) => ({ id: random.int(0, 9999) })),
  prompt: () => "Guess 1-9:",
  episode: Tool.episode({ tools: [check], syntax: Tool.brackets, onParseError: "end", limits: { maxTurns: 4, maxToolCalls: 3 } }),
  reward: Reward.weighted({ solved: [solved, 1], judged: [judged, 0] }),
  services: Layer.mergeAll(AnswerKey.layer, Judge.layer),
  sampling: { maxTokens: 4, temperature: 1 },
  eval: { heldOut: 0.1, size: 16 },
})
