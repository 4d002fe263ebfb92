/**
 * `--backend`: the embedded model (default) or a Tinker-protocol service at a URL.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Effect, Layer } from "effect"
import * as Http from "../backends/http/Client.ts"
import * as CharTokenizer from "../backends/local/CharTokenizer.ts"
import { Local } from "../backends/local/index.ts"
import { BackendError } from "../Contract.ts"
import type { Sampler } from "../Sampler.ts"
import { Tokenizer } from "../Tokenizer.ts"
import type { Trainer } from "../Trainer.ts"
import * as Tokenizers from "../tokenizers/index.ts"
import { defaultModelDir } from "./paths.ts"

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
}

/** The layer for `--backend`, with the tokenizer that goes with it. */
export const backendLayer = (options: BackendOptions): Layer.Layer<Trainer | Sampler | Tokenizer, { readonly message: string }> => {
  const lora = options.loraRank === undefined ? undefined : { rank: options.loraRank, alpha: 2 * options.loraRank, targets: ["q", "k", "v", "o", "w1", "w2"] as const }
  if (options.backend === "embedded") {
    // a run folder or a checkpoint is not a base model: say what to use instead
    const model = options.model
    if (model !== undefined && (model.endsWith(".ckpt") || Fs.existsSync(Path.join(model, "checkpoints.jsonl")) || Fs.existsSync(Path.join(model, "..", "checkpoints.jsonl")))) {
      return Layer.effectContext(Effect.fail(
        new BackendError({
          reason: "InvalidInput",
          operation: "--model",
          message: `--model ${model} is a run folder (or a checkpoint), not a base model folder: start RL from it with --init-from ${model}`,
        }),
      ))
    }
    return Local.layer({
      seed: options.seed,
      stateDir: options.stateDir,
      // the base model shipped with gyre, wherever the command runs
      modelDir: options.model ?? defaultModelDir,
      ...(lora !== undefined ? { lora } : {}),
      // trainer threads share each forward_backward, the sampler has its own thread
      ...(options.workers ? { workers: true, trainerThreads: Math.min(2, Os.availableParallelism()) } : {}),
    })
  }
  if (!/^https?:\/\//.test(options.backend)) {
    return Layer.effectContext(Effect.fail(
      new BackendError({ reason: "InvalidInput", operation: "--backend", message: `--backend must be "embedded" or an http(s):// URL, got ${JSON.stringify(options.backend)}` }),
    ))
  }
  // The remote model's own tokenizer and chat template with --tokenizer; without it, assume
  // the server runs gyre's embedded model (`npx tsx serve`) and its character tokenizer.
  const tokenizer = options.tokenizer !== undefined
    ? Tokenizers.layer(options.tokenizer)
    : Layer.succeed(Tokenizer, CharTokenizer.make())
  return Layer.merge(
    Http.layer({ baseUrl: options.backend, baseModel: options.model, loraRank: options.loraRank }),
    tokenizer,
  )
}
