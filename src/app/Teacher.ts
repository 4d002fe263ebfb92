/**
 * The teacher of on-policy distillation (`--teacher`): an embedded model that scores every
 * token the student sampled, standing in for the KL penalty's reference (`Reference`).
 *
 * A teacher is a base model folder (a model shipped with gyre by name, e.g. `calculator`,
 * or a folder with `weights.bin`), or a run (its folder, `runs/<name>/step-N` or a state
 * file): the run's base model, from its `config.json`, with the adapter of its checkpoint.
 * Its tokenizer must be the student's; another is refused, naming both.
 *
 * On a remote backend a model or run found on this machine is started here as well; any
 * other name is scored by the service itself (`served`): a sampler path (`tinker://…`) or
 * a base model it serves, or on Loops another run left up (`loops:<run id>`). The
 * backend's `Reference` is then the teacher (`app/Backend.ts`).
 *
 * @since 0.1.0
 */
import { Context, Effect, Layer } from "effect"
import * as Path from "node:path"
import { Local } from "../backends/local/index.ts"
import * as PlatformFs from "../platform/FileSystem.ts"
import { resolveModelDir, shippedModels } from "../Paths.ts"
import { Reference } from "../services/Reference.ts"
import { modelFlag, recordedTrainer, resolveInit } from "../run/Start.ts"
import { RunError, type Teacher } from "../run/Settings.ts"
import { Sampler } from "../services/Sampler.ts"
import { Tokenizer } from "../services/Tokenizer.ts"
import { Trainer } from "../services/Trainer.ts"

/** The forms a teacher (or a frozen player) may take, for errors. */
const forms = () => `give a model shipped with gyre (${shippedModels().join(", ")}), a model folder with weights.bin, or a run (runs/<name>, runs/<name>/step-N, a state file)`

const bad = (label: string, given: string, what: string) => new RunError({ reason: "Settings", message: `${label} ${given}: ${what}; ${forms()}` })

/**
 * What `--teacher` (or, with `label`, a frozen player) names, resolved: the base model
 * folder, and the state file of a run's checkpoint with its LoRA rank.
 * @since 0.1.0 @category constructors
 */
export const resolve = Effect.fn("Teacher.resolve")(function* (given: string, coef: number, label = "--teacher", backend = "embedded") {
  if (backend === "embedded") return yield* local(given, coef, label)
  // on a remote backend: a model or run on this machine is started here, as on the embedded
  // one; anything else (a sampler path, a base model, loops:<run id>) the service scores
  if (given.trim() === "") return yield* new RunError({ reason: "Settings", message: `${label} on --backend ${backend}: name a model the service serves (a sampler path such as tinker://…, or a base model${backend === "loops" ? ", or loops:<run id>" : ""}), or a model or run on this machine` })
  const served: Teacher = { given, model: given, served: true, coef }
  if (given.includes("://") || given.startsWith("loops:")) return served
  return yield* local(given, coef, label).pipe(Effect.orElseSucceed(() => served))
})

/** A teacher on this machine: a model folder or shipped model, or a run's checkpoint of an embedded model. */
const local = Effect.fnUntraced(function* (given: string, coef: number, label: string): Effect.fn.Return<Teacher, RunError> {
  const modelDir = resolveModelDir(given)
  if (modelDir !== undefined && (yield* PlatformFs.exists(Path.join(modelDir, "weights.bin")))) return { given, model: Path.resolve(modelDir), coef } satisfies Teacher
  const source = yield* resolveInit(given, { flag: label, forms: forms() })
  const newest = source.candidates[0]
  if (newest === undefined) return yield* bad(label, given, "it names no checkpoint")
  const recorded = source.dir !== undefined ? yield* recordedTrainer(source.dir) : undefined
  if (recorded === undefined || !recorded.model.startsWith("local:")) {
    return yield* bad(label, given, "its run folder records no embedded base model (config.json's trainer): only an embedded run can be started here")
  }
  return { given, model: modelFlag(recorded.model), state: newest.path, loraRank: recorded.loraRank, coef } satisfies Teacher
})

/** A model as `--teacher` (or a frozen player) names it, resolved. @since 0.1.0 @category models */
export type FrozenSpec = Pick<Teacher, "given" | "model" | "state" | "loraRank">

/**
 * A model frozen as it is: its own embedded trainer and sampler, a run's adapter loaded
 * and published; its tokenizer must be the run's (`Tokenizer`). `label` names it in errors.
 * @since 0.1.0 @category constructors
 */
export const frozen = Effect.fnUntraced(function* (spec: FrozenSpec, stateDir: string, label: string) {
  const fail = (what: string) => new RunError({ reason: "Settings", message: `${label} ${spec.given}: ${what}` })
  const run = yield* Tokenizer
  const lora = spec.loraRank !== undefined ? { lora: { rank: spec.loraRank, alpha: 2 * spec.loraRank, targets: ["q", "k", "v", "o", "w1", "w2"] as const } } : {}
  const context = yield* Layer.build(Layer.fresh(Local.layer({ modelDir: spec.model, seed: 0, stateDir, ...lora }))).pipe(
    Effect.mapError((e) => fail(`${spec.model} cannot start: ${e.message}`)),
  )
  const own = Context.get(context, Tokenizer)
  if (own.name !== run.name || own.vocabSize !== run.vocabSize) {
    return yield* fail(`its tokenizer is ${own.name} (${own.vocabSize} tokens), the run's ${run.name} (${run.vocabSize}): they are compared token by token, so they must be the same`)
  }
  const trainer = Context.get(context, Trainer)
  if (spec.state !== undefined) yield* trainer.loadState(spec.state, { withOptimizer: false }).pipe(Effect.mapError((e) => fail(`cannot load ${spec.state}: ${e.message}`)))
  const published = yield* trainer.saveWeightsForSampler("frozen").pipe(Effect.mapError((e) => fail(e.message)))
  return { sampler: Context.get(context, Sampler), version: published.version }
})

/**
 * The teacher as the run's `Reference`: a frozen model (`frozen`) whose sampler computes
 * the log-probs.
 * @since 0.1.0 @category layers
 */
export const layer = (teacher: Teacher, stateDir: string): Layer.Layer<Reference, RunError, Tokenizer> =>
  Layer.effect(
    Reference,
    Effect.gen(function* () {
      const { sampler, version } = yield* frozen(teacher, stateDir, "--teacher")
      yield* Effect.logInfo(`teacher: ${teacher.model}${teacher.state !== undefined ? ` with ${teacher.state}` : ""} (coefficient ${teacher.coef})`)
      return Reference.of({
        logprobs: (inputs) => Effect.forEach(inputs, (input) => sampler.computeLogprobs(input, { minPolicyVersion: version })),
        check: Effect.void,
      })
    }),
  )
