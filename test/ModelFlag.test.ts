/**
 * `--model`: a bare name of a model shipped with gyre (`models/<name>`) is that model
 * wherever the command runs; a path that exists wins; any other name is refused, listing
 * the shipped names.
 */
import * as Os from "node:os"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { backendLayer } from "../src/app/Backend.ts"
import { resolveModelDir, shippedModel, shippedModels } from "../src/Paths.ts"
import { Trainer } from "../src/services/Trainer.ts"

const embedded = (model: string) =>
  backendLayer({ backend: "embedded", seed: 0, stateDir: Os.tmpdir(), model, loraRank: undefined, tokenizer: undefined, workers: false })

describe("--model", () => {
  it.effect("a shipped model's name loads it, although the working folder has no such folder", () =>
    Effect.gen(function* () {
      const info = yield* Effect.flatMap(Trainer, (t) => t.info).pipe(Effect.provide(embedded("calculator")))
      assert.strictEqual(info.modelName, `local:${shippedModel("calculator")}`)
    }))

  it.effect("an unknown name is refused, naming the shipped models", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flatMap(Trainer, (t) => t.info).pipe(Effect.provide(embedded("no-such-model")), Effect.flip)
      assert.include(error.message, "--model no-such-model: no such folder, and no model shipped with gyre has that name (shipped: base, base-256, calculator, functions)")
    }))

  it("a path that exists wins over a shipped name", () => {
    assert.deepStrictEqual(shippedModels(), ["base", "base-256", "calculator", "functions"])
    assert.strictEqual(resolveModelDir("test"), "test")
    assert.strictEqual(resolveModelDir("models/base"), "models/base")
    assert.strictEqual(resolveModelDir("base"), shippedModel("base"))
  })
})
