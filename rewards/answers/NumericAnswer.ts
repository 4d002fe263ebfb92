/**
 * The numeric answer reward: where a completion's answer is read (`AnswerMode`: the last
 * or first number, tagged or `\boxed{}` blocks, or the first that applies), and
 * `numericAnswer`, which compares it with the problem's number.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { Reward } from "gyre"
import { tagContents } from "../format.ts"
import { endNumber, extractNumbers, numbersEqual, parseNumber } from "./Numbers.ts"
import { type Thinking, thinkingReader, UNFINISHED_THINKING } from "./Thinking.ts"

/** The contents of every closed `\boxed{...}` (or `\fbox{...}`), braces balanced. */
const boxedContents = (text: string): Array<string> => {
  const re = /\\(?:boxed|fbox)\s*\{/g
  const out: Array<string> = []
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const start = m.index + m[0].length
    let depth = 1
    for (let i = start; i < text.length; i++) {
      if (text[i] === "{") depth++
      else if (text[i] === "}" && --depth === 0) {
        out.push(text.slice(start, i))
        break
      }
    }
  }
  return out
}

/** No number (`none`), one, or several (`many`) in a delimited answer. */
const blockNumber = (content: string): number | "none" | "many" => {
  const whole = parseNumber(content)
  if (whole !== undefined) return whole
  const all = extractNumbers(content)
  return all.length === 0 ? "none" : all.length === 1 ? all[0]! : "many"
}

/**
 * The one number the answer blocks of a completion give. Blocks without a number (a
 * restated format, `<answer>...</answer>`) are skipped; a block with several numbers, or
 * blocks that give different numbers, make it no answer: several answers hedge.
 */
const blocksNumber = (blocks: ReadonlyArray<string>): number | undefined => {
  let value: number | undefined
  for (const b of blocks) {
    const n = blockNumber(b)
    if (n === "none") continue
    if (n === "many" || (value !== undefined && n !== value)) return undefined
    value = n
  }
  return value
}

/**
 * Where the answer is read from a completion:
 * - `"last"`: the last number in the text (the default);
 * - `"first"`: the first number;
 * - `"tagged"`: the number inside the `<tag>...</tag>` blocks (tag "answer" by default);
 * - `"boxed"`: the number inside the `\boxed{...}` blocks;
 * - `"auto"`: tagged if the completion has the tag, else boxed if it has a `\boxed{}`,
 *   else the number after a final `####` (GSM8K style), else the last number.
 *
 * Hedging is no answer. In the last and first modes, a number that ends (or starts) a
 * list of different alternatives is none (`12 or 56`, `55, 56, 57`, `12 (56)`: numbers
 * separated only by whitespace, `,` `;` `|` brackets, or the words or, and, nor, either,
 * maybe, perhaps, possibly, vs). In the tagged and boxed modes a block must hold exactly
 * one number (`<answer>x = 42</answer>` is 42; `<answer>3 or 4</answer>` is no answer),
 * and blocks that give different numbers are no answer (`\boxed{55} \boxed{56}`);
 * blocks without a number (a restated format) are skipped. Digits of every script count
 * (`５６` is 56).
 * @since 0.1.0 @category models
 */
export type AnswerMode = "last" | "first" | "tagged" | "boxed" | "auto"

/**
 * The numeric answer a completion gives under a mode, or undefined when it gives none.
 *
 * @example
 * extractAnswer("2 + 2 = 4, so 4.", "last") // => 4
 * extractAnswer("I think 5. <answer>4</answer>", "tagged") // => 4
 * extractAnswer("so \\boxed{\\frac{3}{4}}", "boxed") // => 0.75
 * @since 0.1.0 @category utils
 */
export const extractAnswer = (text: string, mode: AnswerMode = "last", tag = "answer"): number | undefined => {
  switch (mode) {
    case "tagged":
      return blocksNumber(tagContents(text, tag))
    case "boxed":
      return blocksNumber(boxedContents(text))
    case "first":
      return endNumber(text, "first")
    case "last":
      return endNumber(text, "last")
    case "auto": {
      const tagged = tagContents(text, tag)
      if (tagged.length > 0) return blocksNumber(tagged)
      const boxed = boxedContents(text)
      if (boxed.length > 0) return blocksNumber(boxed)
      // GSM8K style: the number after `####`; several `####` must agree
      const marked = text.split("####").slice(1).filter((part) => extractNumbers(part).length > 0)
      if (marked.length > 0) {
        const values = marked.map((part) => endNumber(part, "first"))
        return values.every((v) => v !== undefined && v === values[0]) ? values[0] : undefined
      }
      return endNumber(text, "last")
    }
  }
}

/**
 * The completion without verbatim copies of its prompt (each message's text, at least 8
 * characters long): numbers quoted from the question are not an answer to it, so echoing
 * "What is 0 plus 8?" does not answer 8.
 */
const withoutPrompt = (completion: string, prompt: string | ReadonlyArray<{ readonly content: string }>): string => {
  const texts = (typeof prompt === "string" ? [prompt] : prompt.map((m) => m.content)).map((t) => t.trim()).filter((t) => t.length >= 8)
  let out = completion
  for (const t of texts) out = out.split(t).join(" ")
  return out
}

/** Options of `numericAnswer`. @since 0.1.0 @category models */
export interface NumericAnswerOptions {
  /** component name (default "correct") */
  readonly name?: string
  /** where the answer is read (default "last"); see `AnswerMode` */
  readonly mode?: AnswerMode
  /** tag for the "tagged" and "auto" modes (default "answer") */
  readonly tag?: string
  /** tolerance for non-integers, relative above 1 and absolute below (default 1e-9) */
  readonly tolerance?: number
  /** the score of a completion that gives no answer at all (default 0) */
  readonly noAnswerPenalty?: number
  /** read only the final answer, after the last thinking block: true for `<think>...</think>`, or markers (see `Thinking`) */
  readonly thinking?: Thinking
}

/**
 * 1 when the completion's answer equals the gold number, else 0. Verbatim copies of the
 * prompt in the completion are skipped (numbers quoted from the question do not answer
 * it); hedges (`12 or 56`, several different boxed answers) are no answer; see
 * `AnswerMode`. With `thinking`, only what follows the last thinking block is read, and
 * a completion that never ends its thinking block gives no answer.
 *
 * `gold` returns the answer as a number or as text (`"1,234"`, `"3/4"`); `undefined`
 * means the problem has no numeric answer, and the reward does not apply
 * (`NotApplicable`). A completion that gives no answer is the model's fault
 * (`ModelFault`) and scores `noAnswerPenalty`. A gold answer that is not a finite
 * number is a bug in the data: the run stops with a `RewardDefect`.
 *
 * @example
 * numericAnswer((p: { a: number; b: number }) => p.a + p.b)
 * numericAnswer((p: { answer: string }) => p.answer, { mode: "tagged", noAnswerPenalty: -0.5 })
 * numericAnswer((p: { answer: number }) => p.answer, { mode: "boxed", thinking: true })
 * @since 0.1.0 @category constructors
 */
export const numericAnswer = <P>(
  gold: (problem: P) => number | string | undefined,
  options: NumericAnswerOptions = {},
): Reward.Reward<P> => {
  const name = options.name ?? "correct"
  const mode = options.mode ?? "last"
  const tag = options.tag ?? "answer"
  const tolerance = options.tolerance ?? 1e-9
  const penalty = options.noAnswerPenalty ?? 0
  if (!(tolerance >= 0 && Number.isFinite(tolerance))) throw new TypeError(`numericAnswer: tolerance must be a finite number >= 0, got ${tolerance}`)
  if (!Number.isFinite(penalty)) throw new TypeError(`numericAnswer: noAnswerPenalty must be finite, got ${penalty}`)
  const finalPart = thinkingReader("numericAnswer", options.thinking)
  const noAnswer = mode === "tagged" ? `no <${tag}> block holding one number` : mode === "boxed" ? "no \\boxed{} holding one number" : "no number in the completion"
  return Reward.make<P>(name, (r) => {
    const raw = gold(r.problem)
    if (raw === undefined) return Effect.fail(new Reward.NotApplicable({ message: "the problem has no numeric answer" }))
    const want = typeof raw === "number" ? raw : parseNumber(raw)
    if (want === undefined || !Number.isFinite(want)) throw new TypeError(`the gold answer ${JSON.stringify(raw)} is not a finite number`)
    const text = finalPart(r.completion)
    if (text === undefined) return Effect.fail(new Reward.ModelFault({ penalty, message: UNFINISHED_THINKING }))
    const answer = extractAnswer(withoutPrompt(text, r.prompt), mode, tag)
    if (answer === undefined) return Effect.fail(new Reward.ModelFault({ penalty, message: noAnswer }))
    return numbersEqual(answer, want, tolerance) ? 1 : 0
  })
}
