import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import * as fc from "fast-check"
import { Reward } from "gyre"
import { arb, laws, score, transforms } from "gyre/testing"
import {
  type AnswerMode,
  exactMatch,
  extractAnswer,
  extractNumbers,
  normalizeText,
  numbersEqual,
  numericAnswer,
  parseNumber,
} from "../../rewards/answers.ts"

interface Sum {
  readonly a: number
  readonly b: number
}
const sum = (p: Sum) => p.a + p.b
const problems = fc.record({ a: fc.integer({ min: -1_000_000, max: 1_000_000 }), b: fc.integer({ min: -1_000_000, max: 1_000_000 }) })

/**
 * A plain completion: noise with distractor numbers, words that introduce the answer, the
 * answer, then noise without numbers. (A distractor followed by the answer with only
 * spaces or commas between them is a list of alternatives, which is no answer.)
 */
const plainAnswer = (answer: number | string | fc.Arbitrary<string>) =>
  fc
    .tuple(
      arb.noise({ digits: true }),
      fc.constantFrom(" so ", "\nthe answer is ", " = ", ": ", " which gives "),
      arb.answerCompletion(answer, { distractors: false }),
    )
    .map((parts) => parts.join(""))

describe("numbers", () => {
  it("parseNumber reads every format back", () =>
    fc.assert(fc.property(arb.number(), ({ text, value }) => assert.strictEqual(parseNumber(text), value))))

  it("parseNumber reads every spelling of a number back", () =>
    fc.assert(fc.property(fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true })).chain((v) => fc.tuple(fc.constant(v), arb.spellings(v))), ([v, text]) => {
      assert.isTrue(numbersEqual(parseNumber(text)!, v, 0), `${text} -> ${parseNumber(text)}, want ${v}`)
    })))

  it("parseNumber rejects what is not one number", () => {
    for (const text of ["", "-", "12 apples", "1 2", "1/0", "abc", "3/", "--5", "9".repeat(400)]) {
      assert.isUndefined(parseNumber(text), text)
    }
  })

  it("extractNumbers reads numbers in context", () => {
    assert.deepStrictEqual(extractNumbers("From 1,200 apples, -3/4 were sold for $2.50."), [1200, -0.75, 2.5])
    assert.deepStrictEqual(extractNumbers("7-5=2"), [7, 5, 2])
    assert.deepStrictEqual(extractNumbers("x = −5 and (-.5)"), [-5, -0.5])
    assert.deepStrictEqual(extractNumbers("12,34 and 1,2345"), [12, 34, 1, 2345])
    assert.deepStrictEqual(extractNumbers("\\frac{3}{4} or \\dfrac{-1}{2}, 6.02e23"), [0.75, -0.5, 6.02e23])
    assert.deepStrictEqual(extractNumbers("nothing here"), [])
  })

  it("numbersEqual compares integers exactly and other numbers with a tolerance", () => {
    assert.isTrue(numbersEqual(0.75, 3 / 4))
    assert.isTrue(numbersEqual(1 / 3, 0.3333333333333))
    assert.isFalse(numbersEqual(1234567890123, 1234567890124))
    assert.isFalse(numbersEqual(0.3333, 1 / 3))
    assert.isFalse(numbersEqual(Number.NaN, Number.NaN))
  })

  it("noise without digits holds no number", () =>
    fc.assert(fc.property(arb.noise(), (text) => assert.deepStrictEqual(extractNumbers(text), []))))
})

describe("extractAnswer", () => {
  const cases = (style: arb.AnswerStyle) =>
    arb.number().chain((n) => fc.tuple(fc.constant(n), style === "plain" ? plainAnswer(n.text) : arb.answerCompletion(n.text, { style })))

  const modes: ReadonlyArray<[AnswerMode, arb.AnswerStyle]> = [
    ["last", "plain"],
    ["tagged", "tagged"],
    ["boxed", "boxed"],
    ["auto", "plain"],
    ["auto", "tagged"],
    ["auto", "boxed"],
  ]
  for (const [mode, style] of modes) {
    it(`${mode} mode reads the answer of a ${style} completion despite noise and distractors`, () =>
      fc.assert(fc.property(cases(style), ([n, completion]) => {
        assert.strictEqual(extractAnswer(completion, mode), n.value, completion)
      })))
  }

  it("first mode reads the first number", () =>
    fc.assert(fc.property(arb.number(), arb.noise({ digits: true }), (n, rest) => {
      assert.strictEqual(extractAnswer(`${n.text} is it; ${rest}`, "first"), n.value)
    })))

  it("tagged mode: blocks must agree, and a block must hold exactly one number", () => {
    assert.isUndefined(extractAnswer("<answer>1</answer> no, <answer>x = 2</answer>", "tagged"))
    assert.strictEqual(extractAnswer("format: <answer>...</answer>, so <answer>x = 2</answer>", "tagged"), 2)
    assert.strictEqual(extractAnswer("<answer>2</answer> again <answer>2.0</answer>", "tagged"), 2)
    assert.strictEqual(extractAnswer("<Answer type=\"int\">7</Answer>", "tagged"), 7)
    assert.isUndefined(extractAnswer("<answer>3 or 4</answer>", "tagged"))
    assert.isUndefined(extractAnswer("<answer>42", "tagged"))
    assert.isUndefined(extractAnswer("42", "tagged"))
    assert.strictEqual(extractAnswer("<final>5</final>", "tagged", "final"), 5)
  })

  it("boxed mode balances braces", () => {
    assert.isUndefined(extractAnswer("\\boxed{1} then \\boxed{\\frac{3}{4}}", "boxed"))
    assert.strictEqual(extractAnswer("\\boxed{\\frac{3}{4}} = \\boxed{0.75}", "boxed"), 0.75)
    assert.isUndefined(extractAnswer("\\boxed{2^{10}}", "boxed"))
    assert.isUndefined(extractAnswer("\\boxed{5", "boxed"))
  })

  it("auto mode falls back to #### and then to the last number", () => {
    assert.strictEqual(extractAnswer("3 apples #### 1,000 (done 5)", "auto"), 1000)
    assert.strictEqual(extractAnswer("3 apples and 4", "auto"), 4)
  })
})

describe("hedges are no answer", () => {
  it("a trailing (or leading) list of different numbers", () => {
    for (const text of ["12 or 56", "55, 56, 57", "55\n56", "it is 12 (56)", "maybe 12, maybe 56", "12 | 56", "either 12 or 56", "56 ５７"]) {
      assert.isUndefined(extractAnswer(text, "last"), text)
      assert.isUndefined(extractAnswer(text, "auto"), text)
    }
    assert.isUndefined(extractAnswer("56 or 12 it is", "first"))
    assert.isUndefined(extractAnswer("#### 12 or 56", "auto"))
    // not lists: work before the answer, a repeated answer, a thousands separator
    assert.strictEqual(extractAnswer("2 + 2 = 4, so 4.", "last"), 4)
    assert.strictEqual(extractAnswer("7 times 8 is 56", "last"), 56)
    assert.strictEqual(extractAnswer("56, 56", "last"), 56)
    assert.strictEqual(extractAnswer("it is 1,234", "last"), 1234)
    assert.strictEqual(extractAnswer("x = 3 and y = 6", "last"), 6)
  })

  it("several boxed or tagged answers that differ", () => {
    assert.isUndefined(extractAnswer("\\boxed{55} \\boxed{56}", "boxed"))
    assert.isUndefined(extractAnswer("<answer>55</answer><answer>56</answer>", "tagged"))
    assert.isUndefined(extractAnswer("<answer>55</answer><answer>56</answer>", "auto"))
  })

  it("digits of every script are digits: a final answer in fullwidth digits is read", () => {
    assert.strictEqual(extractAnswer("so ５６", "last"), 56)
    assert.strictEqual(extractAnswer("so ٥٦", "last"), 56)
    assert.strictEqual(extractAnswer("so 𝟓𝟔", "last"), 56)
    // superscripts and circled digits are not decimal digits
    assert.deepStrictEqual(extractNumbers("2⁵ ⑤"), [2])
  })

  it.effect("a copy of the prompt is not an answer", () =>
    Effect.gen(function* () {
      const reward = numericAnswer((p: Sum) => p.a + p.b)
      const p = { a: 0, b: 8 }
      const echoed = yield* score(reward, p, "What is 0 plus 8?", { prompt: "What is 0 plus 8?" })
      assert.strictEqual(echoed.value, 0)
      const answered = yield* score(reward, p, "What is 0 plus 8? It is 8", { prompt: "What is 0 plus 8?" })
      assert.strictEqual(answered.value, 1)
    }))
})

describe("numericAnswer", () => {
  const reward = numericAnswer(sum)

  it("is bounded and deterministic on any completion", () => laws.wellBehaved(reward, { min: 0, max: 1, problems }))

  it("scores 1 on the gold answer in any spelling, with noise and distractors", () =>
    laws.goldScoresMax(reward, { problems, gold: (p) => plainAnswer(sum(p)) }))

  it("scores 0 on a wrong answer", () =>
    laws.agrees(reward, {
      problems,
      completions: (p) => fc.integer({ min: 1, max: 1000 }).chain((d) => arb.answerCompletion(sum(p) + d)),
      expected: () => 0,
    }))

  it("does not notice whitespace padding or trailing words", async () => {
    await laws.invariant(reward, { problems, transform: transforms.padWhitespace })
    await laws.invariant(reward, { problems, transform: transforms.appendNoise })
  })

  for (const style of ["tagged", "boxed"] as const) {
    it(`reads ${style} answers in ${style} mode`, () =>
      laws.goldScoresMax(numericAnswer(sum, { mode: style }), { problems, gold: (p) => arb.answerCompletion(sum(p), { style }) }))
  }

  it("scores the declared penalty when there is no answer (a ModelFault)", () =>
    laws.agrees(numericAnswer(sum, { noAnswerPenalty: -0.5 }), { problems, completions: arb.noise(), expected: () => -0.5 }))

  it("does not apply when the gold is undefined, and accepts gold text", () =>
    Effect.gen(function* () {
      const maybe = numericAnswer((p: { answer?: string }) => p.answer)
      assert.isUndefined((yield* score(maybe, {}, "42")).value)
      assert.strictEqual((yield* score(maybe, { answer: "1,234" }, "It is 1234.")).value, 1)
      assert.strictEqual((yield* score(maybe, { answer: "3/4" }, "0.75")).value, 1)
      assert.strictEqual((yield* score(maybe, { answer: "3/4" }, "0.7")).value, 0)
    }))

  it("stops with a RewardDefect naming the reward when the gold is not a number", () =>
    Effect.gen(function* () {
      const broken = numericAnswer((p: { answer: string }) => p.answer, { name: "gsm8k" })
      const exit = yield* Effect.exit(score(broken, { answer: "twelve" }, "12"))
      assert.isTrue(Exit.isFailure(exit))
      const error = Exit.isFailure(exit) ? exit.cause : undefined
      assert.match(String(error), /gsm8k/)
      assert.match(String(error), /twelve/)
    }))

  it("rejects bad options at once", () => {
    assert.throws(() => numericAnswer(sum, { tolerance: -1 }), /tolerance/)
    assert.throws(() => numericAnswer(sum, { noAnswerPenalty: Number.NaN }), /noAnswerPenalty/)
  })

  it("keeps the component name \"correct\" by default", () => assert.deepStrictEqual(Reward.componentNames(reward), ["correct"]))
})

describe("exactMatch", () => {
  const cities = ["Paris", "New York", "Rio de Janeiro", "São Paulo", "The Hague"]
  const reward = exactMatch((p: { city: string }) => p.city)
  const cityProblems = fc.constantFrom(...cities).map((city) => ({ city }))

  it("is bounded and deterministic", () => laws.wellBehaved(reward, { min: 0, max: 1, problems: cityProblems }))

  it("ignores case, whitespace, punctuation and articles", () =>
    laws.goldScoresMax(reward, {
      problems: cityProblems,
      gold: (p) =>
        fc
          .tuple(fc.constantFrom("", "the ", "The ", "a "), fc.constantFrom("", ".", "!", "?\n"), arb.whitespace())
          .chain(([article, mark, ws]) => transforms.changeCase(`${ws}${article}${p.city}${mark}${ws}`)),
    }))

  it("does not notice padding or stretched whitespace", async () => {
    await laws.invariant(reward, { problems: cityProblems, transform: transforms.padWhitespace })
    await laws.invariant(reward, { problems: cityProblems, transform: transforms.stretchWhitespace })
  })

  it("accepts any of several gold texts, and reads a tagged answer", () =>
    Effect.gen(function* () {
      const aliases = exactMatch((p: { names: Array<string> }) => p.names, { tag: "answer", noAnswerPenalty: -1 })
      const p = { names: ["NYC", "New York City"] }
      assert.strictEqual((yield* score(aliases, p, "I think <answer>new york city</answer>")).value, 1)
      assert.strictEqual((yield* score(aliases, p, "<answer>nyc.</answer>")).value, 1)
      assert.strictEqual((yield* score(aliases, p, "<answer>Boston</answer>")).value, 0)
      assert.strictEqual((yield* score(aliases, p, "New York City")).value, -1)
    }))

  it("compares exactly with normalize: false", () =>
    Effect.gen(function* () {
      const strict = exactMatch((p: { city: string }) => p.city, { normalize: false })
      assert.strictEqual((yield* score(strict, { city: "Paris" }, "Paris")).value, 1)
      assert.strictEqual((yield* score(strict, { city: "Paris" }, "paris")).value, 0)
    }))

  it("normalizeText applies only the requested normalizations", () => {
    assert.strictEqual(normalizeText("  The Eiffel   Tower! "), "eiffel tower")
    assert.strictEqual(normalizeText("The  Tower!", { case: true }), "the  tower!")
    assert.strictEqual(normalizeText("The  Tower!", { punctuation: true, whitespace: true }), "The Tower")
    assert.strictEqual(normalizeText("Theory of a cat", { articles: true, whitespace: true }), "Theory of cat")
  })
})
