/**
 * `arb.answerCompletion` keeps its promise: the answer extractor reads the answer back
 * from every completion it makes, in every style, distractors included. (A distractor
 * right before a plain answer with only whitespace between them, "0/1  594", would be a
 * list of candidates, which hedges: the generator sets them apart with a word or a sign.)
 */
import { assert, describe, it } from "@effect/vitest"
import * as fc from "fast-check"
import { extractAnswer } from "../../rewards/answers.ts"
import { arb } from "../../src/testing/index.ts"

describe("arb.answerCompletion", () => {
  for (const [style, mode] of [["plain", "last"], ["tagged", "tagged"], ["boxed", "boxed"], ["plain", "auto"]] as const) {
    it(`${style} completions read back in ${mode} mode, with distractors`, () =>
      fc.assert(
        fc.property(
          arb.number().chain((n) => fc.tuple(fc.constant(n), arb.answerCompletion(n.text, { style }))),
          ([n, completion]) => assert.strictEqual(extractAnswer(completion, mode), n.value, JSON.stringify(completion)),
        ),
        { numRuns: 2_000 },
      ))
  }

  it("a plain answer after a number is set apart by a word or a sign", () =>
    fc.assert(
      fc.property(arb.answerCompletion(594), (completion) => assert.notMatch(completion, /\d[\s,;|()[\]]*\s594(?!\d)/, JSON.stringify(completion))),
      { numRuns: 2_000 },
    ))
})
