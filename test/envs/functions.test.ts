import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Layer, Scope } from "effect"
import { Env } from "gyre"
import { score } from "gyre/testing"
import { Sandbox } from "../../rewards/code.ts"
import { decodeChars, encodeChars, EOS } from "../../src/backends/local/CharTokenizer.ts"
import { loadBaseModel } from "../../src/backends/local/Checkpoint.ts"
import { initTf } from "../../src/backends/local/index.ts"
import { LocalModel } from "../../src/backends/local/Model.ts"
import { LocalSamplerEngine } from "../../src/backends/local/SamplerEngine.ts"
import functions, { f, line, prompt, tests } from "../../envs/functions.ts"

const scope = Scope.makeUnsafe()
// the layer the env provides (its `services`), built once for the file
const services = await Effect.runPromise(Scope.provide(Layer.build(Sandbox.layer({ concurrency: 2 })), scope))
afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))
const scoreOf = (problem: { a: number; b: number }, completion: string) =>
  Effect.runPromise(Effect.provide(score(functions.reward, problem, completion), services))

const all = Array.from({ length: 90 }, (_, i) => ({ a: 1 + Math.floor(i / 10), b: i % 10 }))

describe("envs/functions.ts", () => {
  it("prompt and completion fit the embedded model's 48 characters at difficulty 1 and 2", () => {
    for (const p of [...all, { a: 99, b: 99 }]) assert.isAtMost(1 + prompt(p).length + functions.sampling!.maxTokens!, 48, prompt(p))
    assert.strictEqual(prompt({ a: 3, b: 1 }), "f(2)=7,f(3)=10. f(x)=")
    assert.strictEqual(line({ a: 3, b: 1 }), "7+(x-2)*(10-7)")
  })

  it("provides the sandbox its reward needs", () => assert.isTrue(Layer.isLayer(functions.services)))

  it("holds 18 of its 90 functions out", () => {
    assert.strictEqual(all.filter((p) => Env.splitOf(functions, p) === "eval").length, 18)
  })

  it("tests the two shown points and three hidden ones", () => {
    assert.deepStrictEqual(tests({ a: 3, b: 1 }).map((t) => [t.args[0], t.expected]), [[2, 7], [3, 10], [0, 1], [1, 4], [5, 16]])
  })

  it("scores the reference (the line through the shown points) 1, a copied value 1/5, a number or a hostile program 0", async () => {
    for (const p of [{ a: 3, b: 1 }, { a: 7, b: 0 }, { a: 99, b: 99 }]) {
      const s = await scoreOf(p, functions.reference!(p))
      assert.strictEqual(s.components["correct"], 1, functions.reference!(p))
    }
    assert.strictEqual((await scoreOf({ a: 3, b: 1 }, ` ${f({ a: 3, b: 1 })(2)}`)).components["correct"], 0.2)
    assert.strictEqual((await scoreOf({ a: 3, b: 1 }, " 8")).components["correct"], 0)
    const loop = await scoreOf({ a: 3, b: 1 }, "{for(;;);}")
    assert.deepStrictEqual([loop.components["correct"], loop.masked], [0, undefined])
  })
})

describe("models/functions", () => {
  it("writes the line through the shown points on some samples of a held-out function and a constant on others: the decision RL learns", async () => {
    await initTf()
    const { config, weights } = await loadBaseModel("models/functions")
    const sampler = new LocalSamplerEngine(new LocalModel(config, weights), { seed: 0, prefixCacheSize: 0 })
    const held = all.filter((p) => Env.splitOf(functions, p) === "eval")
    const encoded = encodeChars(prompt(held[0]!))
    if (!("ids" in encoded)) throw new Error("the prompt is not ASCII")
    const r = await sampler.sample([1, ...encoded.ids], { maxTokens: functions.sampling!.maxTokens!, temperature: 1, seed: 3 }, { numSamples: 64 })
    sampler.dispose()
    const texts = r.sequences.map((s) => decodeChars(s.tokens.filter((t) => t !== EOS)))
    const lines = texts.filter((t) => /^\d+\+\(x-2\)\*\(\d+-\d+\)$/.test(t)).length
    const constants = texts.filter((t) => /^\d+$/.test(t)).length
    assert.isAbove(lines, 0, texts.join(" | "))
    assert.isAbove(constants, lines, texts.join(" | "))
  })
})
