/**
 * A judge: a reward that asks a language model a templated question about a rollout and
 * parses a score from its reply.
 *
 * The judge model is a service, `Judge`, that the env provides through its `services`:
 * `Judge.ownSampler` asks the run's own sampler (the policy being trained, as it is
 * now), `Judge.fromBackend(layer)` asks another backend (e.g. a served model over HTTP,
 * with its tokenizer). A transport failure is an `InfraFault` (retried, then the sample
 * is masked); a reply with no score in it is a `ModelFault` of the judge (penalty 0 by
 * default).
 *
 * @example
 * const graded = judge<Problem>({
 *   question: (r) => `Is ${r.completion} the answer to ${r.prompt}? Score 0 or 1:`,
 * })
 * Env.make({ ..., reward: graded, services: Judge.ownSampler })
 */
import { Context, Effect, Layer } from "effect"
import { Contract, Reward, Sampler, Tokenizer } from "gyre"

/** What the judge service does: one question in, one reply out. */
export interface JudgeShape {
  readonly ask: (question: string, options: { readonly maxTokens: number; readonly temperature: number }) => Effect.Effect<string, Reward.InfraFault>
}

const fromServices = Effect.gen(function* () {
  const sampler = yield* Sampler
  const tokenizer = yield* Tokenizer
  return {
    ask: (question, options) =>
      Effect.gen(function* () {
        const ids = yield* tokenizer.encode(question)
        const prompt = tokenizer.bos === undefined ? ids : [tokenizer.bos, ...ids]
        const out = yield* sampler.sample(Contract.modelInputFromTokens(prompt), { maxTokens: options.maxTokens, temperature: options.temperature }, { numSamples: 1 })
        const tokens = out.sequences[0]?.tokens ?? []
        return tokenizer.decode(tokens[tokens.length - 1] === tokenizer.eos ? tokens.slice(0, -1) : tokens)
      }).pipe(Effect.mapError((e) => new Reward.InfraFault({ message: `the judge could not answer: ${e.message}` }))),
  } satisfies JudgeShape
})

/** The judge model a `judge` reward asks. */
export class Judge extends Context.Service<Judge, JudgeShape>()("gyre/rewards/Judge") {
  /** the run's own sampler and tokenizer: the policy as it is now */
  static readonly ownSampler: Layer.Layer<Judge, never, Sampler | Tokenizer> = Layer.effect(Judge, fromServices)
  /** another backend, given as a layer that provides a `Sampler` and a `Tokenizer` */
  static readonly fromBackend = <E>(backend: Layer.Layer<Sampler | Tokenizer, E>): Layer.Layer<Judge, E> =>
    Layer.effect(Judge, fromServices).pipe(Layer.provide(backend))
}

/** The last number in a reply, if any. */
export const lastNumber = (reply: string): number | undefined => {
  const all = reply.match(/-?\d+(?:\.\d+)?/g)
  return all === null ? undefined : Number(all[all.length - 1])
}

/**
 * A reward scored by the `Judge`: `question` renders the rollout, `score` parses the
 * reply (default: its last number, which must lie in [min, max]).
 */
export const judge = <P>(options: {
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
} & Reward.LeafOptions): Reward.Reward<P, Judge> => {
  const { question, name = "judge", score = lastNumber, min = 0, max = 1, unparsedPenalty = 0, maxTokens = 8, temperature = 0, ...leaf } = options
  return Reward.make<P, Judge>(name, (r) =>
    Effect.gen(function* () {
      const judgeModel = yield* Judge
      const reply = yield* judgeModel.ask(question(r), { maxTokens, temperature })
      const value = score(reply)
      if (value === undefined || !Number.isFinite(value) || value < min || value > max) {
        return yield* new Reward.ModelFault({ penalty: unparsedPenalty, message: `the judge's reply ${JSON.stringify(reply.slice(0, 80))} holds no score in [${min}, ${max}]` })
      }
      return value
    }), leaf)
}
