/**
 * Rescoring a run folder as the `rescore` command does: the scorer named (an env by name
 * or path, a module whose default export is a Reward, or the run's own env), the
 * tokenizer, and for services that use the run's sampler the run's backend with its
 * newest checkpoint published; then `Rescore.rescore` and `Rescore.write`.
 *
 * @since 0.1.0
 */
import { createRequire } from "node:module"
import { pathToFileURL } from "node:url"
import { Effect, Layer } from "effect"
import * as CharTokenizer from "../../backends/local/CharTokenizer.ts"
import { backendLayer } from "../Backend.ts"
import { BackendError } from "../../contract/Contract.ts"
import * as Env from "../../vocabulary/Env.ts"
import { envFile, loadEnv } from "../LoadEnv.ts"
import * as Rescore from "../Rescore.ts"
import * as Reward from "../../vocabulary/Reward.ts"
import * as RunFolder from "../../folder/RunFolder.ts"
import { Sampler } from "../../services/Sampler.ts"
import { Tokenizer } from "../../services/Tokenizer.ts"
import { Trainer } from "../../services/Trainer.ts"
import * as Tokenizers from "../../tokenizers/index.ts"

/** What `gyre rescore` takes, as an object (each field is the argument or flag of the same name). @since 0.1.0 @category models */
export interface RescoreOptions {
  /** the run folder */
  readonly run: string
  /** an env (name or path) or a module whose default export is a Reward, or either itself; default: the run's own env */
  readonly scorer?: string | Env.AnyEnv | Env.Mixture | Reward.Reward<any, any> | undefined
  /** for services that use the run's sampler: "embedded" or a URL (default: the run's backend) */
  readonly backend?: string | undefined
  /** embedded: the base model folder (default: the env's, else gyre's) */
  readonly model?: string | undefined
  /** folder with the run's model's tokenizer files (default: gyre's character tokenizer) */
  readonly tokenizer?: string | undefined
  /** write the results into the run folder (default true) */
  readonly write?: boolean | undefined
}

const scorerError = (message: string) => new Rescore.RescoreError({ reason: "Scorer", message })

/** A module's default export when it is a Reward (its `services` export with it), else undefined. */
const rewardModule = Effect.fnUntraced(function* (spec: string) {
  const file = envFile(spec)
  // loadEnv imported it already: this is the same module
  const mod = yield* Effect.tryPromise({
    try: () => import(pathToFileURL(file).href).catch(() => ({ default: createRequire(file)(file) as unknown })) as Promise<Record<string, unknown>>,
    catch: (e) => scorerError(`${file} failed to load: ${e instanceof Error ? e.message : String(e)}`),
  })
  const value = Reward.isReward(mod["default"]) ? mod["default"] : (mod["default"] as Record<string, unknown> | undefined)?.["default"]
  if (!Reward.isReward(value)) return undefined
  const services = mod["services"]
  if (services !== undefined && !Layer.isLayer(services)) return yield* scorerError(`${file}: its \`services\` export must be a Layer`)
  return { reward: value, services: services as Layer.Layer<any, unknown, Env.RunServices> | undefined }
})

/** Loads what `scorer` names: an env (its reward) or a reward module. */
const loadScorer = Effect.fnUntraced(function* (spec: string) {
  const loaded = yield* loadEnv(spec).pipe(
    Effect.map((source) => ({ _tag: "Env", source }) as const),
    Effect.catchTag("EnvError", (e) => (e.reason === "InvalidDefinition" && /must have a default export/.test(e.message) ? Effect.succeed(e) : Effect.fail(e))),
    Effect.mapError((e) => scorerError(e.message)),
  )
  if (loaded._tag === "Env") return loaded
  const reward = yield* rewardModule(spec)
  if (reward === undefined) {
    return yield* scorerError(`${loaded.message.replace(/must have a default export made with /, "must have a default export made with Reward.make/Reward.weighted/..., or with ")}`)
  }
  return { _tag: "Reward", ...reward } as const
})

/** The run's own env, as config.json names it (to decode or regenerate problems), or undefined when it does not load. */
const runEnv = (config: Rescore.RunConfig) => {
  const spec = config.envSpec ?? config.env
  return spec === undefined ? Effect.succeed(undefined) : loadEnv(spec).pipe(Effect.orElseSucceed(() => undefined))
}

/** The scorer of `options`: the env or reward given (loaded when named), else the run's own env. */
const resolveScorer = Effect.fnUntraced(function* (options: RescoreOptions, run: Rescore.StoredRun) {
  const given = options.scorer ?? run.config.envSpec ?? run.config.env
  if (given === undefined) return yield* scorerError(`${run.dir}'s config.json names no env: give an env or a reward module, e.g. gyre rescore ${run.dir} math`)
  if (Env.isEnv(given) || Env.isMixture(given)) return { scorer: { _tag: "Env", source: given } as Rescore.Scorer, name: given.name }
  if (Reward.isReward(given)) return { scorer: { _tag: "Reward", reward: given, problems: yield* runEnv(run.config) } as Rescore.Scorer, name: given.name }
  const loaded = yield* loadScorer(given)
  const scorer: Rescore.Scorer = loaded._tag === "Env" ? loaded : { ...loaded, problems: yield* runEnv(run.config) }
  return { scorer, name: given }
})

/** A sampler for scorers without services: nothing asks it. */
const noSampler = Layer.succeed(Sampler, Sampler.of({
  sample: () => Effect.fail(new BackendError({ reason: "InvalidInput", operation: "sample", message: "rescoring samples nothing" })),
  computeLogprobs: () => Effect.fail(new BackendError({ reason: "InvalidInput", operation: "compute_logprobs", message: "rescoring samples nothing" })),
  version: Effect.succeed(0),
}))

/**
 * What scoring needs: a tokenizer, and for services that use the run's sampler (a judge
 * asking the policy) the run's backend with its newest checkpoint published.
 */
const scoringLayer = (options: RescoreOptions, run: Rescore.StoredRun, scorer: Rescore.Scorer): Layer.Layer<Sampler | Tokenizer, { readonly message: string }> => {
  if (!Rescore.needsServices(scorer)) {
    return Layer.merge(options.tokenizer !== undefined ? Tokenizers.layer(options.tokenizer) : Layer.succeed(Tokenizer, CharTokenizer.make()), noSampler)
  }
  const files = RunFolder.paths(run.dir)
  const backend = options.backend ?? run.config.backend ?? "embedded"
  const source = scorer._tag === "Env" ? scorer.source : undefined
  const layer = backendLayer({
    backend,
    seed: 0,
    stateDir: files.state,
    model: options.model ?? (backend === "embedded" && source !== undefined && Env.isEnv(source) ? source.baseModel : undefined),
    loraRank: run.config.trainer?.loraRank,
    tokenizer: options.tokenizer,
    workers: false,
  })
  const publish = Effect.gen(function* () {
    const trainer = yield* Trainer
    const newest = (yield* RunFolder.readCheckpoints(files)).pop()
    if (newest !== undefined) yield* trainer.loadState(yield* RunFolder.statePath(files, newest))
    yield* trainer.saveWeightsForSampler("rescore")
  })
  return Layer.effectDiscard(publish).pipe(Layer.provideMerge(layer))
}

/**
 * Rescores a run folder; see {@link RescoreOptions}. Returns the rows and summary, what
 * scored them, and the files written (none with `write: false`).
 * @since 0.1.0 @category rescoring
 */
export const rescoreRun = Effect.fn("Rescore.run")(function* (options: RescoreOptions) {
  const run = yield* Rescore.read(options.run)
  const { scorer, name } = yield* resolveScorer(options, run)
  const result = yield* Rescore.rescore(run, scorer, { scorer: name }).pipe(
    Effect.provide(Layer.fresh(scoringLayer(options, run, scorer))),
    Effect.mapError((e) => (e instanceof Rescore.RescoreError ? e : new Rescore.RescoreError({ reason: "Services", message: `the run's backend, for the scorer's services: ${e.message}` }))),
  )
  const written = options.write === false ? undefined : yield* Rescore.write(run.dir, result)
  return { ...result, dir: run.dir, scorer: name, kind: scorer._tag === "Env" ? "env" : "reward", written }
})
