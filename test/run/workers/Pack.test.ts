/**
 * What crosses between threads comes back the same: `unpack(structuredClone(pack(x)))`
 * equals `x` (numbers exactly, -0 and NaN included), an array held in several places stays
 * one array, and a shortened episode's turns get their whole inputs back.
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { pack, unpack } from "../../../src/run/workers/Pack.ts"
import { lengthen, shorten } from "../../../src/run/workers/Turns.ts"
import type { EpisodeRecord, TurnRecord } from "../../../src/run/Rollout.ts"

const across = <A>(x: A): A => {
  const { packed, transfer } = pack(x)
  return unpack<A>(structuredClone(packed, { transfer }))
}

const value = fc.letrec((tie) => ({
  any: fc.oneof({ depthSize: "small" }, fc.double(), fc.integer(), fc.string(), fc.boolean(), fc.constant(null), fc.constant(undefined), tie("numbers"), tie("list"), tie("record")),
  numbers: fc.array(fc.oneof(fc.double(), fc.integer(), fc.constant(-0)), { maxLength: 40 }),
  list: fc.array(tie("any"), { maxLength: 4 }),
  record: fc.dictionary(fc.string({ maxLength: 4 }), tie("any"), { maxKeys: 4 }),
}))

describe("Pack", () => {
  it("gives back what it packed", () => {
    fc.assert(fc.property(value.any, (x) => {
      assert.deepStrictEqual(across(x), x)
    }))
  })

  it("moves arrays of numbers as buffers, and keeps a shared array shared", () => {
    const prompt = Array.from({ length: 100 }, (_, i) => i * 0.5)
    const { packed, transfer } = pack({ a: prompt, b: [prompt, prompt] })
    assert.strictEqual(transfer.length, 1)
    const back = unpack<{ a: Array<number>; b: Array<Array<number>> }>(structuredClone(packed, { transfer }))
    assert.deepStrictEqual(back.a, prompt)
    assert.strictEqual(back.b[0], back.a)
    assert.strictEqual(back.b[1], back.a)
  })
})

const turn = (input: Array<number>, sampled: Array<number>): TurnRecord => ({ input, sampled, logprobs: sampled.map(() => -1), text: "t", stopReason: "stop" })

describe("Turns", () => {
  it("sends a turn that goes on from the one before as its new tokens, and puts its input back together", () => {
    const prompt = [1, 2, 3]
    const first = turn(prompt, [4, 5])
    const second = turn([1, 2, 3, 4, 5, 6, 7], [8])
    const unrelated = turn([9, 9], [1])
    const episode: EpisodeRecord = { turns: [first, second, unrelated], stop: "completed", toolCalls: 1, toolErrors: 0, parseErrors: 0, turnReward: 0, version: 0 }
    const short = shorten([episode])
    assert.notDeepEqual(short[0]!.turns[1]!.input, second.input)
    assert.deepStrictEqual(short[0]!.turns[2]!.input, unrelated.input)
    assert.deepStrictEqual(lengthen(across(short)), [episode])
  })
})
