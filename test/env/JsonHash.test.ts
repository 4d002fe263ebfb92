/**
 * The split hash computed without the JSON text is the hash of the JSON text, for any
 * value: plain data (strings with every kind of code unit, lone surrogates included),
 * and what `JSON.stringify` treats specially (toJSON, class instances, undefined members).
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { Env } from "gyre"
import { jsonHash } from "../../src/env/JsonHash.ts"

const viaText = (prefix: string, value: unknown) => Env.hash32(`${prefix}${JSON.stringify(value)}`)

describe("jsonHash", () => {
  it("is hash32 of the prefix and the value's JSON, for any JSON-like value", () => {
    const strings = fc.oneof(fc.string(), fc.string({ unit: "binary" }), fc.string({ unit: "grapheme" }), fc.constantFrom("\u0000\u001f\"\\\b\f\n\r\t", "\ud800", "a\udc00b", "😀"))
    const values = fc.letrec((tie) => ({
      value: fc.oneof(
        { depthSize: "small" },
        strings,
        fc.double(),
        fc.integer(),
        fc.boolean(),
        fc.constant(null),
        fc.constant(undefined),
        fc.array(tie("value")),
        fc.dictionary(strings, tie("value")),
        fc.constantFrom(new Date(0), { toJSON: () => "custom" }, new Map([[1, 2]]), () => 1, Symbol("s"), Object.create(null) as object),
      ),
    }))
    fc.assert(fc.property(strings, values.value, (prefix, value) => jsonHash(prefix, value) === viaText(prefix, value)), { numRuns: 2000 })
  })

  it("hashes a problem row the same way: what the split of a row has always been", () => {
    const row = { question: "q1: 1 * 7 + 1", answer: 8, note: null, tags: ["a", "b"], nested: { x: 1.5, y: undefined } }
    assert.strictEqual(jsonHash("pinned:", row), viaText("pinned:", row))
    // a number of the value the split has always had for this text
    assert.strictEqual(jsonHash("pinned:", { question: "q", answer: 1 }), Env.hash32(`pinned:{"question":"q","answer":1}`))
  })

  it("a value JSON.stringify cannot write fails the same way", () => {
    const cyclic: Record<string, unknown> = {}
    cyclic.self = cyclic
    assert.throws(() => jsonHash("p:", cyclic), TypeError)
    assert.throws(() => jsonHash("p:", { n: 1n }), TypeError)
  })
})
