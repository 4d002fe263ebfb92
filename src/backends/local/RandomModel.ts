/**
 * The model `serve --random-init` builds: gyre's small char model, or with `--tokenizer` a
 * random model of a real tokenizer's vocabulary (Qwen3's ~151,669 ids) and a context long
 * enough for real prompts, so that a real model's chat template, hermes tool calls and the
 * agent endpoint run end to end offline. The flags are checked here, with messages that
 * name them.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { BackendError } from "../../contract/Contract.ts"
import type { ModelConfig } from "./Config.ts"
import { RANDOM_CONFIG, RANDOM_PREFIX_CACHE_SIZE, randomConfigFor } from "./Serve.ts"

/** `serve`'s flags that choose a random model. @since 0.1.0 @category models */
export interface RandomModelFlags {
  readonly randomInit: boolean
  /** `--tokenizer`: a folder with tokenizer.json and tokenizer_config.json */
  readonly tokenizer?: string | undefined
  /** `--context-length` */
  readonly contextLength?: number | undefined
}

/** The random model to serve, and the tokenizer name the server reports to clients. @since 0.1.0 @category models */
export interface RandomModel {
  readonly config: ModelConfig
  readonly tokenizerId: string
  readonly prefixCacheSize: number | undefined
}

const invalid = (operation: string, message: string) => new BackendError({ reason: "InvalidInput", operation, message })

/**
 * The random model the flags ask for, or undefined without `--random-init`. The tokenizer
 * is loaded (lazily: it pulls in the tokenizer library) only to read its vocabulary size.
 * @since 0.1.0 @category constructors
 */
export const randomModel = Effect.fn("RandomModel.randomModel")(function* (flags: RandomModelFlags) {
  if (!flags.randomInit) {
    if (flags.tokenizer !== undefined) {
      return yield* invalid(
        "--tokenizer",
        `--tokenizer ${flags.tokenizer} sizes a --random-init model's vocabulary; a model folder speaks its own tokenizer (gyre's shipped models: char-ascii). Add --random-init, or drop --tokenizer`,
      )
    }
    if (flags.contextLength !== undefined) {
      return yield* invalid("--context-length", `--context-length ${flags.contextLength} sets a --random-init model's context; a model folder has its own. Add --random-init, or drop --context-length`)
    }
    return undefined
  }
  if (flags.tokenizer === undefined) {
    const config = flags.contextLength === undefined ? RANDOM_CONFIG : { ...RANDOM_CONFIG, contextLength: flags.contextLength }
    return { config, tokenizerId: "char-ascii", prefixCacheSize: undefined } satisfies RandomModel
  }
  const dir = flags.tokenizer
  const HfTokenizer = yield* Effect.promise(() => import("../../tokenizers/HfTokenizer.ts"))
  const tokenizer = yield* HfTokenizer.fromDirectory(dir).pipe(
    Effect.mapError((e) => invalid("--tokenizer", `--tokenizer ${dir}: ${e.message} (give a folder with tokenizer.json and tokenizer_config.json)`)),
  )
  const config = randomConfigFor(tokenizer.vocabSize, flags.contextLength)
  yield* Effect.logInfo(
    `a random model of the vocabulary of the tokenizer in ${dir} (${tokenizer.vocabSize} ids), ${config.contextLength} tokens of context, ${config.nLayers} layers of width ${config.dModel}: it learns nothing useful, it runs the tokenizer's chat template and tool calls end to end`,
  )
  return { config, tokenizerId: tokenizer.name, prefixCacheSize: RANDOM_PREFIX_CACHE_SIZE } satisfies RandomModel
})
