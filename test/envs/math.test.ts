import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Env } from "gyre"
import math, { answer } from "../../envs/math.ts"

const key = (p: unknown) => JSON.stringify(p)
const facts = (["plus", "minus", "times"] as const).flatMap((op) =>
  Array.from({ length: 100 }, (_, i) => ({ a: Math.floor(i / 10), b: i % 10, op })))

describe("envs/math.ts at its default difficulty", () => {
  it("has 300 facts, 75 of them in the eval split", () => {
    const held = facts.filter((p) => Env.splitOf(math, p) === "eval")
    assert.strictEqual(held.length, 75)
    for (const op of ["plus", "minus", "times"]) assert.isAbove(held.filter((p) => p.op === op).length, 15, op)
  })

  it.effect("the eval set is the whole eval split, each fact once, and training never draws one of them", () =>
    Effect.gen(function* () {
      const held = new Set(facts.filter((p) => Env.splitOf(math, p) === "eval").map(key))
      const info = yield* Env.evalSetInfo(math, { seed: 0 })
      assert.strictEqual(info.requested, 300)
      assert.isTrue(info.exhausted)
      assert.sameMembers(info.tasks.map((t) => key(t.problem)), [...held])
      const train = yield* Env.distinctTasks(math, { split: "train", seed: 0, size: 300 })
      assert.strictEqual(train.tasks.length, 225)
      for (const t of train.tasks) assert.isFalse(held.has(key(t.problem)), key(t.problem))
      const stream = yield* Effect.forEach(Array.from({ length: 500 }, (_, index) => index), (index) => Env.problemAt(math, { seed: 3, index, split: "train" }))
      for (const t of stream) assert.isFalse(held.has(key(t.problem)), key(t.problem))
    }))

  it("the reference completion is the answer", () => {
    for (const p of facts) assert.strictEqual(math.reference!(p), ` ${answer(p)}`)
  })
})
