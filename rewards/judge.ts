/**
 * A judge: a reward that asks a language model a templated question about a rollout and
 * parses a score from its reply.
 *
 * The judge model is a service, `Judge`, that the env provides through its `services`:
 * `Judge.ownSampler` asks the run's own sampler (the policy being trained, as it is
 * now), `Judge.fromBackend(layer)` asks another backend (e.g. a served model over HTTP,
 * with its tokenizer). A transport failure is an `InfraFault` (retried, then the sample
 * is masked); a reply with no score in it is a `ModelFault` of the judge (penalty 0 by
 * default). Every reply is noted with its rollout (`notes` in `rollouts.jsonl` and
 * `eval.jsonl`, and the report), so a judge stuck at one score can be read.
 *
 * Where the judge model's context length is known (`ownSampler` reads the run's model;
 * `fromBackend` takes `contextLength`), a question is measured before it is asked. A
 * question that leaves no room to sample is an `InfraFault` (counted and logged as a
 * failure, for any weight); when even the question of the problem alone (the rollout's
 * completion and turns left out) leaves no room for a reply of `maxTokens`, the judge
 * can never answer, and the run stops at its first question, naming the judge and the
 * lengths.
 *
 * @example
 * const graded = judge<Problem>({
 *   question: (r) => `Is ${r.completion} the answer to ${r.prompt}? Score 0 or 1:`,
 * })
 * Env.make({ ..., reward: graded, services: Judge.ownSampler })
 */
import { Context, Effect, Layer, Option } from "effect"
import { Contract, Reward, Sampler, Tokenizer, Trainer } from "gyre"

/** What the judge service does: one question in, one reply out. */
export interface JudgeShape {
  readonly ask: (question: string, options: { readonly maxTokens: number; readonly temperature: number }) => Effect.Effect<string, Reward.InfraFault>
  /**
   * The judge model's context length and how many tokens a question takes there (the
   * BOS token included), when known: a question is measured against it before it is asked.
   */
  readonly context?: {
    readonly length: number
    readonly tokens: (question: string) => Effect.Effect<number, Reward.InfraFault>
  }
}

const fromServices = (contextLength: Effect.Effect<number | undefined>) =>
  Effect.gen(function* () {
    const sampler = yield* Sampler
    const tokenizer = yield* Tokenizer
    const length = yield* contextLength
    const encode = (question: string) =>
      Effect.map(tokenizer.encode(question), (ids) => (tokenizer.bos === undefined ? ids : [tokenizer.bos, ...ids]))
    const infra = (e: { readonly message: string }) => new Reward.InfraFault({ message: `the judge could not answer: ${e.message}` })
    return {
      ask: (question, options) =>
        Effect.gen(function* () {
          const prompt = yield* encode(question)
          const out = yield* sampler.sample(Contract.modelInputFromTokens(prompt), { maxTokens: options.maxTokens, temperature: options.temperature }, { numSamples: 1 })
          const tokens = out.sequences[0]?.tokens ?? []
          return tokenizer.decode(tokens[tokens.length - 1] === tokenizer.eos ? tokens.slice(0, -1) : tokens)
        }).pipe(Effect.mapError(infra)),
      ...(length !== undefined ? { context: { length, tokens: (question: string) => Effect.mapError(Effect.map(encode(question), (p) => p.length), infra) } } : {}),
    } satisfies JudgeShape
  })

/** The run's model's context length, read from the run's trainer when there is one. */
const runContextLength: Effect.Effect<number | undefined> = Effect.flatMap(Effect.serviceOption(Trainer), (trainer) =>
  Option.isNone(trainer)
    ? Effect.succeed(undefined)
    : trainer.value.info.pipe(
      Effect.map((info) => (info.maxSequenceLength > 0 ? info.maxSequenceLength : undefined)),
      Effect.orElseSucceed(() => undefined),
    ))

/** The judge model a `judge` reward asks. */
export class Judge extends Context.Service<Judge, JudgeShape>()("gyre/rewards/Judge") {
  /** the run's own sampler and tokenizer (the policy as it is now), measured against the run's context length */
  static readonly ownSampler: Layer.Layer<Judge, never, Sampler | Tokenizer> = Layer.effect(Judge, fromServices(runContextLength))
  /**
   * another backend, given as a layer that provides a `Sampler` and a `Tokenizer`; with
   * `contextLength` (its model's), questions are measured against it before they are asked
   */
  static readonly fromBackend = <E>(backend: Layer.Layer<Sampler | Tokenizer, E>, options: { readonly contextLength?: number } = {}): Layer.Layer<Judge, E> =>
    Layer.effect(Judge, fromServices(Effect.succeed(options.contextLength))).pipe(Layer.provide(backend))
}

/** The last number in a reply, if any. */
export const lastNumber = (reply: string): number | undefined => {
  const all = reply.match(/-?\d+(?:\.\d+)?/g)
  return all === null ? undefined : Number(all[all.length - 1])
}

/** Options of `judge`. */
export interface JudgeOptions<P> extends Reward.LeafOptions {
  readonly question: (rollout: Reward.Rollout<P>) => string
  readonly name?: string
  readonly score?: (reply: string) => number | undefined
  /** range of a valid score (default 0..1) */
  readonly min?: number
  readonly max?: number
  /** what a reply with no score costs the policy (default 0) */
  readonly unparsedPenalty?: number
  readonly maxTokens?: number
  readonly temperature?: number
}

/**
 * Whether a question fits the judge model's context. One that leaves no room to sample is
 * an `InfraFault`; if the question of the problem alone (no completion, no turns) leaves
 * no room for the reply, no question of this problem can fit, and the judge dies with a
 * `RewardDefect` that stops the run.
 */
const checkFits = Effect.fnUntraced(function* <P>(judgeModel: JudgeShape, options: JudgeOptions<P>, rollout: Reward.Rollout<P>, question: string, maxTokens: number) {
  const context = judgeModel.context
  if (context === undefined) return
  const tokens = yield* context.tokens(question)
  if (tokens < context.length) return
  const alone: Reward.Rollout<P> = { problem: rollout.problem, prompt: rollout.prompt, completion: "", tokens: [], stopReason: rollout.stopReason, index: rollout.index, groupSize: rollout.groupSize }
  const bare = yield* Effect.option(Effect.try(() => options.question(alone)))
  const bareTokens = Option.isSome(bare) ? yield* context.tokens(bare.value) : undefined
  if (bareTokens !== undefined && bareTokens + maxTokens > context.length) {
    return yield* Effect.die(
      new Reward.RewardDefect({
        reward: options.name ?? "judge",
        message:
          `the judge's question cannot fit its model's context: with no completion it has ${bareTokens} tokens, and with a reply of up to ${maxTokens} (maxTokens) ` +
          `it needs ${bareTokens + maxTokens}, more than the context length ${context.length} (this rollout's question has ${tokens}); shorten the question or lower maxTokens`,
      }),
    )
  }
  return yield* new Reward.InfraFault({ message: `the judge's question has ${tokens} tokens; the context length is ${context.length}, leaving no room to answer` })
})

/**
 * A reward scored by the `Judge`: `question` renders the rollout, `score` parses the
 * reply (default: its last number, which must lie in [min, max]). Each reply is noted
 * with the rollout.
 */
export const judge = <P>(options: JudgeOptions<P>): Reward.Reward<P, Judge> => {
  const { question, name = "judge", score = lastNumber, min = 0, max = 1, unparsedPenalty = 0, maxTokens = 8, temperature = 0, ...leaf } = options
  return Reward.make<P, Judge>(name, (r, context) =>
    Effect.gen(function* () {
      const judgeModel = yield* Judge
      const asked = question(r)
      yield* checkFits(judgeModel, options, r, asked, maxTokens)
      const reply = yield* judgeModel.ask(asked, { maxTokens, temperature })
      context.note(reply)
      const value = score(reply)
      if (value === undefined || !Number.isFinite(value) || value < min || value > max) {
        return yield* new Reward.ModelFault({ penalty: unparsedPenalty, message: `the judge's reply ${JSON.stringify(reply.slice(0, 80))} holds no score in [${min}, ${max}]` })
      }
      return value
    }), leaf)
}
