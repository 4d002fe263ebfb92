/**
 * Format rewards: regular expressions, tags, tag sequences and JSON objects.
 *
 * Every reward here scores 1 when the completion has the format and 0 when it does
 * not; none of them fails, so they are safe as gates (`Reward.all`) and as
 * zero-weight metrics.
 *
 * @since 0.1.0
 */
import { Exit, Schema } from "effect"
import { Reward } from "gyre"
import { type Thinking, thinkingReader } from "./answers/Thinking.ts"

/** 1 when the completion's final part (see `thinking`) passes the check; 0 when it fails or never ends its thinking. */
const scoreFinal = (finalPart: (completion: string) => string | undefined, completion: string, check: (text: string) => boolean): number => {
  const text = finalPart(completion)
  return text !== undefined && check(text) ? 1 : 0
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")

const checkTagName = (who: string, tag: string) => {
  if (!/^[A-Za-z_][\w.-]*$/.test(tag)) throw new TypeError(`${who}: tag must be a name like "answer", got ${JSON.stringify(tag)}`)
}

/** The regex of one `<tag ...>...</tag>` block (case-insensitive tag name, lazy content). */
const tagBlock = (tag: string, flags = "gi") => new RegExp(`<${escapeRegExp(tag)}(?:\\s[^>]*)?>([\\s\\S]*?)</${escapeRegExp(tag)}\\s*>`, flags)

/**
 * The contents of every closed `<tag>...</tag>` block in a text, in order. The tag name
 * is matched case-insensitively and may carry attributes (`<answer type="int">`).
 *
 * @example
 * tagContents("<answer>1</answer> then <answer>2</answer>", "answer") // => ["1", "2"]
 * @since 0.1.0 @category utils
 */
export const tagContents = (text: string, tag: string): Array<string> => [...text.matchAll(tagBlock(tag))].map((m) => m[1]!)

/**
 * The contents of the last closed `<tag>...</tag>` block, or undefined when there is none.
 * The last block wins because models often restate the format before answering.
 *
 * @example
 * lastTagContent("<answer> 42 </answer>", "answer") // => " 42 "
 * @since 0.1.0 @category utils
 */
export const lastTagContent = (text: string, tag: string): string | undefined => {
  const all = tagContents(text, tag)
  return all[all.length - 1]
}

/** Options shared by the format rewards. @since 0.1.0 @category models */
export interface FormatOptions {
  /** component name */
  readonly name?: string
  /**
   * check only the final answer, after the last thinking block: true for
   * `<think>...</think>`, or markers (see `Thinking`); a completion that never ends its
   * thinking block scores 0
   */
  readonly thinking?: Thinking
}

/**
 * 1 when the completion matches `pattern`, else 0. A string pattern is compiled as a
 * regular expression. The `g` and `y` flags are dropped, so the reward keeps no state
 * between calls (a global regex's `lastIndex` would make it non-deterministic).
 *
 * @example
 * matches(/^\s*Answer:/m) // 1 for "Answer: 4", 0 for "4"
 * @since 0.1.0 @category constructors
 */
export const matches = <P = unknown>(pattern: RegExp | string, options: FormatOptions = {}): Reward.Reward<P> => {
  const source = typeof pattern === "string" ? pattern : pattern.source
  const flags = typeof pattern === "string" ? "" : pattern.flags.replace(/[gy]/g, "")
  const regex = new RegExp(source, flags)
  const finalPart = thinkingReader("matches", options.thinking)
  return Reward.make<P>(options.name ?? "format", (r) => scoreFinal(finalPart, r.completion, (text) => regex.test(text)))
}

/** Options of `hasTag`. @since 0.1.0 @category models */
export interface HasTagOptions extends FormatOptions {
  /** the block must hold something other than whitespace (default true) */
  readonly nonEmpty?: boolean
  /** the tag must appear exactly once (default false) */
  readonly once?: boolean
}

/**
 * 1 when the completion has a closed `<tag>...</tag>` block, else 0. An opening tag
 * without its closing tag (a truncated completion) does not count.
 *
 * @example
 * hasTag("answer") // 1 for "so <answer>4</answer>", 0 for "<answer>4"
 * @since 0.1.0 @category constructors
 */
export const hasTag = <P = unknown>(tag: string, options: HasTagOptions = {}): Reward.Reward<P> => {
  checkTagName("hasTag", tag)
  const nonEmpty = options.nonEmpty ?? true
  const finalPart = thinkingReader("hasTag", options.thinking)
  return Reward.make<P>(options.name ?? `has_${tag}`, (r) =>
    scoreFinal(finalPart, r.completion, (text) => {
      const blocks = tagContents(text, tag)
      if (blocks.length === 0 || (options.once === true && blocks.length !== 1)) return false
      return !nonEmpty || blocks.some((b) => b.trim() !== "")
    }))
}

/** Options of `tagSequence`. @since 0.1.0 @category models */
export interface TagSequenceOptions extends FormatOptions {
  /** nothing but whitespace may surround or separate the blocks (default true) */
  readonly strict?: boolean
  /**
   * blocks that must hold something other than whitespace: true (every block, the
   * default), false (none), or the tags that must (e.g. `["answer"]` to allow an empty
   * `<think></think>`)
   */
  readonly nonEmpty?: boolean | ReadonlyArray<string>
}

/**
 * 1 when the completion is made of the given tag blocks in order, else 0, as in the
 * `<think>...</think> <answer>...</answer>` format. Strict by default: only
 * whitespace may surround or separate the blocks. Empty blocks do not count by default
 * (`<think></think><answer></answer>` scores 0; see `nonEmpty`).
 *
 * @example
 * tagSequence(["think", "answer"]) // 1 for "<think>2+2</think>\n<answer>4</answer>"
 * @since 0.1.0 @category constructors
 */
export const tagSequence = <P = unknown>(tags: ReadonlyArray<string>, options: TagSequenceOptions = {}): Reward.Reward<P> => {
  if (tags.length === 0) throw new TypeError("tagSequence: give at least one tag")
  for (const tag of tags) checkTagName("tagSequence", tag)
  const gap = options.strict ?? true ? "\\s*" : "[\\s\\S]*?"
  const nonEmpty = options.nonEmpty ?? true
  const mustHold = (t: string) => nonEmpty === true || (Array.isArray(nonEmpty) && nonEmpty.some((n) => n.toLowerCase() === t.toLowerCase()))
  // a block that must hold something has a non-whitespace character inside
  const inside = (t: string) => (mustHold(t) ? `\\s*(?!</${escapeRegExp(t)}\\s*>)\\S[\\s\\S]*?` : "[\\s\\S]*?")
  const blocks = tags.map((t) => `<${escapeRegExp(t)}(?:\\s[^>]*)?>${inside(t)}</${escapeRegExp(t)}\\s*>`)
  const regex = new RegExp(`^${gap}${blocks.join(gap)}${gap}$`, "i")
  const finalPart = thinkingReader("tagSequence", options.thinking)
  return Reward.make<P>(options.name ?? "format", (r) => scoreFinal(finalPart, r.completion, (text) => regex.test(text)))
}

/** Options of `jsonObject`. @since 0.1.0 @category models */
export interface JsonObjectOptions extends FormatOptions {
  /**
   * where the object may be: `"whole"` (the completion, trimmed, is the object),
   * `"fenced"` (also inside a ```json fence), `"anywhere"` (also the first balanced
   * `{...}` in the text; the default)
   */
  readonly find?: "whole" | "fenced" | "anywhere"
}

/** The first balanced `{...}` span of a text, honouring JSON strings, or undefined. */
const firstBraced = (text: string): string | undefined => {
  const start = text.indexOf("{")
  if (start < 0) return undefined
  let depth = 0
  let inString = false
  for (let i = start; i < text.length; i++) {
    const c = text[i]
    if (inString) {
      if (c === "\\") i++
      else if (c === "\"") inString = false
    } else if (c === "\"") inString = true
    else if (c === "{") depth++
    else if (c === "}" && --depth === 0) return text.slice(start, i + 1)
  }
  return undefined
}

const parseObject = (text: string): Record<string, unknown> | undefined => {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return undefined
  }
  return typeof value === "object" && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined
}

/**
 * The JSON object a completion holds, or undefined. See `JsonObjectOptions.find`.
 *
 * @example
 * findJsonObject('Sure: {"a": 1}') // => { a: 1 }
 * @since 0.1.0 @category utils
 */
export const findJsonObject = (text: string, find: "whole" | "fenced" | "anywhere" = "anywhere"): Record<string, unknown> | undefined => {
  const whole = parseObject(text.trim())
  if (whole !== undefined || find === "whole") return whole
  const fence = /```(?:json)?[ \t]*\n?([\s\S]*?)```/i.exec(text)
  const fenced = fence ? parseObject(fence[1]!.trim()) : undefined
  if (fenced !== undefined || find === "fenced") return fenced
  const braced = firstBraced(text)
  return braced === undefined ? undefined : parseObject(braced)
}

/**
 * 1 when the completion holds a JSON object (and, given a Schema, the object decodes
 * with it), else 0.
 *
 * @example
 * jsonObject(Schema.Struct({ answer: Schema.Number })) // 1 for '{"answer": 4}', 0 for '{"answer": "4"}'
 * @since 0.1.0 @category constructors
 */
export const jsonObject = <P = unknown, A = unknown>(
  schema?: Schema.Decoder<A>,
  options: JsonObjectOptions = {},
): Reward.Reward<P> => {
  const decode = schema === undefined ? undefined : Schema.decodeUnknownExit(schema)
  const finalPart = thinkingReader("jsonObject", options.thinking)
  return Reward.make<P>(options.name ?? "json", (r) =>
    scoreFinal(finalPart, r.completion, (text) => {
      const value = findJsonObject(text, options.find ?? "anywhere")
      return value !== undefined && (decode === undefined || Exit.isSuccess(decode(value)))
    }))
}
