/**
 * `Decode.decode` names the failing field from Schema's issue tree: the path is read from
 * the tree's pointers, never parsed out of the formatted text, so a message that looks
 * like a path cannot move the location.
 */
import { assert, describe, it } from "vitest"
import { Result, Schema, SchemaIssue } from "effect"
import { decode, formatIssue } from "../src/util/Decode.ts"

const failure = <A>(r: Result.Result<A, string>) => (Result.isFailure(r) ? r.failure : assert.fail("expected a failure"))

describe("Decode", () => {
  const S = Schema.Struct({ a: Schema.Struct({ b: Schema.Array(Schema.Number) }), n: Schema.optional(Schema.Int) })

  it("names the field in dotted form, under a prefix", () => {
    assert.strictEqual(failure(decode(S)({ a: { b: [1, "x"] } })), "a.b[1]: Expected number")
    assert.strictEqual(failure(decode(S, "body")({ a: { b: [1, "x"] } })), "body.a.b[1]: Expected number")
    assert.strictEqual(failure(decode(S)({})), "a: Missing key")
    assert.strictEqual(failure(decode(S)(5)), "Expected object")
    assert.strictEqual(failure(decode(S, "body")(5)), "body: Expected object")
  })

  it("a message that reads like a path does not move the location", () => {
    const T = Schema.Struct({ name: Schema.String.check(Schema.isMinLength(3, { message: "too short\n  at [\"elsewhere\"]" })) })
    assert.strictEqual(failure(decode(T)({ name: "x" })), "name: too short\n  at [\"elsewhere\"]")
  })

  it("every leaf of the tree, each with its path", () => {
    const issue = new SchemaIssue.Composite(S.ast, [
      new SchemaIssue.Pointer(["a", "b", 0], new SchemaIssue.MissingKey(undefined)),
      new SchemaIssue.Pointer(["n"], new SchemaIssue.MissingKey(undefined)),
    ])
    assert.strictEqual(formatIssue(issue, "p"), "p.a.b[0]: Missing key; p.n: Missing key")
  })
})
