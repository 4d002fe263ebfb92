/**
 * The backend a run trains on, as `--backend` names it: the embedded model (default), a
 * Tinker-protocol service at a URL, or a run provisioned on Loops (`loops`).
 *
 * @since 0.1.0
 */
import * as Os from "node:os"
import * as Path from "node:path"
import { Effect, Layer } from "effect"
import * as Http from "../backends/http/client/Client.ts"
import * as ClientReference from "../backends/http/client/ClientReference.ts"
import * as LoopsBackend from "../backends/loops/Backend.ts"
import { stopCommand } from "../backends/loops/ControlPlane.ts"
import * as LoopsRecord from "../backends/loops/RunRecord.ts"
import * as CharTokenizer from "../backends/local/CharTokenizer.ts"
import { Local } from "../backends/local/index.ts"
import { BackendError } from "../contract/Contract.ts"
import type { Sampler } from "../services/Sampler.ts"
import { Tokenizer } from "../services/Tokenizer.ts"
import type { Trainer } from "../services/Trainer.ts"
import * as Tokenizers from "../tokenizers/index.ts"
import * as RunFolder from "../folder/RunFolder.ts"
import * as PlatformFs from "../platform/FileSystem.ts"
import { defaultModelDir, resolveModelDir, unknownModelMessage } from "../Paths.ts"

/** `--backend loops` settings: the flags of `gyre run` that only Loops reads. */
export interface LoopsFlags {
  /** `--loops-url`: the control plane (default `LOOPS_API_URL`, else Baseten's API) */
  readonly url?: string | undefined
  /** `--keep-run`: leave the run up at the end (it bills until deactivated) */
  readonly keepRun?: boolean | undefined
  /** `--loops-new-run`: with `--resume`, continue on a new run when the folder's run is gone */
  readonly newRun?: boolean | undefined
  /** `--loops-ready-timeout`: seconds a new run may take to be ready (default 1800) */
  readonly readyTimeoutSeconds?: number | undefined
}

export interface BackendOptions {
  readonly backend: string
  readonly seed: number
  /** where the embedded backend writes save_state files (the run folder's state/) */
  readonly stateDir: string
  readonly model: string | undefined
  readonly loraRank: number | undefined
  readonly tokenizer: string | undefined
  /**
   * Put the embedded sampler and trainer in their own worker threads, with the trainer's
   * work split over two threads (async runs always do, so sampling and training overlap)
   */
  readonly workers: boolean
  /** the run folder (Loops records its runs there, in loops.json) */
  readonly runDir?: string | undefined
  /** a resumed run folder */
  readonly resume?: boolean | undefined
  /** `--backend loops` settings */
  readonly loops?: LoopsFlags | undefined
  /**
   * `--teacher` on a remote backend: the model the service scores the student's tokens
   * with (a sampler path or base model; on Loops also `loops:<run id>`), as the Reference
   */
  readonly teacher?: string | undefined
}

/** A run folder with a finished step or a checkpoint: a fresh start there is refused (before anything is provisioned). */
const holdsWork = (dir: string) => RunFolder.holdsWork(RunFolder.paths(dir)).pipe(Effect.orElseSucceed(() => false))

/** `--backend loops`: a run provisioned for this training and deactivated at its end. */
const loopsLayer = (options: BackendOptions, tokenizer: Layer.Layer<Tokenizer, { readonly message: string }>) => {
  const runDir = options.runDir
  if (runDir === undefined) {
    return Layer.effectContext(Effect.fail(
      new BackendError({ reason: "InvalidInput", operation: "--backend loops", message: "--backend loops provisions a run for gyre run (which records it in the run folder); this command does not support it" }),
    ))
  }
  const resume = options.resume === true
  const check = Effect.gen(function* () {
    if (!resume && (yield* holdsWork(runDir))) {
      return yield* new BackendError({
        reason: "InvalidInput",
        operation: "--backend loops",
        message: `run folder ${runDir} already holds a run: continue it with --resume ${runDir}, or pick another --name (no Loops run was provisioned)`,
      })
    }
  })
  const loops = LoopsBackend.layer({
    baseModel: options.model,
    loraRank: options.loraRank,
    name: Path.basename(runDir),
    runDir,
    resume,
    url: options.loops?.url,
    keepRun: options.loops?.keepRun,
    newRun: options.loops?.newRun,
    readyTimeout: LoopsBackend.readyTimeoutOf(options.loops?.readyTimeoutSeconds),
    teacher: options.teacher,
  })
  return Layer.merge(Layer.unwrap(Effect.as(check, loops)), tokenizer)
}

/** Warns when the run folder records a Loops run that gyre did not deactivate (a crash, or --keep-run). */
const reportLiveLoopsRuns = (runDir: string | undefined) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      if (runDir === undefined) return
      const record = yield* LoopsRecord.read(runDir)
      for (const r of LoopsRecord.live(record)) {
        yield* Effect.logWarning(
          `${runDir} records Loops run ${r.id} (${r.baseModel}), which gyre did not deactivate (a crash, or --keep-run): it may still be billing. ` +
            `Check with \`gyre loops runs\`; stop it with \`${stopCommand(r.id, record?.controlPlane)}\``,
        )
      }
    }).pipe(Effect.catch((e) => Effect.logWarning(e.message))),
  )

/** `--model` names neither a folder nor a shipped model: say which names there are. */
export const unknownModel = (model: string) => new BackendError({ reason: "InvalidInput", operation: "--model", message: unknownModelMessage(model) })

/** Whether `--model` names a state file (`.ckpt`) or a run folder (or a folder in one) rather than a base model. */
const isRunFolder = (model: string | undefined) =>
  Effect.gen(function* () {
    if (model === undefined) return false
    if (model.endsWith(".ckpt")) return true
    return (yield* PlatformFs.exists(Path.join(model, "checkpoints.jsonl"))) || (yield* PlatformFs.exists(Path.join(model, "..", "checkpoints.jsonl")))
  })

/** The layer for `--backend`, with the tokenizer that goes with it. */
export const backendLayer = (options: BackendOptions): Layer.Layer<Trainer | Sampler | Tokenizer, { readonly message: string }> => {
  const lora = options.loraRank === undefined ? undefined : { rank: options.loraRank, alpha: 2 * options.loraRank, targets: ["q", "k", "v", "o", "w1", "w2"] as const }
  if (options.backend === "embedded") {
    // a run folder or a checkpoint is not a base model: say what to use instead
    const model = options.model
    return Layer.unwrap(Effect.map(isRunFolder(model), (run): Layer.Layer<Trainer | Sampler | Tokenizer, { readonly message: string }> => {
      if (run) {
        return Layer.effectContext(Effect.fail(
          new BackendError({
            reason: "InvalidInput",
            operation: "--model",
            message: `--model ${model} is a run folder (or a checkpoint), not a base model folder: start RL from it with --init-from ${model}`,
          }),
        ))
      }
      const modelDir = model === undefined ? defaultModelDir : resolveModelDir(model)
      if (modelDir === undefined) return Layer.effectContext(Effect.fail(unknownModel(model ?? "")))
      return Layer.merge(reportLiveLoopsRuns(options.runDir), Local.layer({
        seed: options.seed,
        stateDir: options.stateDir,
        // a folder, or a model shipped with gyre by name, wherever the command runs
        modelDir,
        ...(lora !== undefined ? { lora } : {}),
        // trainer threads share each forward_backward, the sampler has its own thread
        ...(options.workers ? { workers: true, trainerThreads: Math.min(2, Os.availableParallelism()) } : {}),
      }))
    }))
  }
  if (options.backend !== "loops" && !/^https?:\/\//.test(options.backend)) {
    return Layer.effectContext(Effect.fail(
      new BackendError({ reason: "InvalidInput", operation: "--backend", message: `--backend must be "embedded", "loops" or an http(s):// URL, got ${JSON.stringify(options.backend)}` }),
    ))
  }
  // The remote model's own tokenizer and chat template with --tokenizer; without it, assume
  // the server runs gyre's embedded model (`npx tsx serve`) and its character tokenizer.
  const tokenizer = options.tokenizer !== undefined
    ? Tokenizers.layer(options.tokenizer)
    : Layer.succeed(Tokenizer, CharTokenizer.make())
  if (options.backend === "loops") return loopsLayer(options, tokenizer)
  return Layer.mergeAll(
    Http.layer({ baseUrl: options.backend, baseModel: options.model, loraRank: options.loraRank, ...(options.teacher !== undefined ? { reference: ClientReference.scoredModelOf(options.teacher) } : {}) }),
    tokenizer,
    reportLiveLoopsRuns(options.runDir),
  )
}
