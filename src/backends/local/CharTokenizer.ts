/**
 * Character-level tokenizer of the embedded model: the special tokens PAD, BOS and
 * EOS, newline, then the printable ASCII characters 32..126.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import { type Prompt, TokenizeError, type TokenizerShape } from "../../services/Tokenizer.ts"

/** @since 0.1.0 @category constants */
export const PAD = 0
/** @since 0.1.0 @category constants */
export const BOS = 1
/** @since 0.1.0 @category constants */
export const EOS = 2
const NEWLINE = 3
const FIRST_PRINTABLE = 4
/** 3 special tokens, newline, 95 printable characters @since 0.1.0 @category constants */
export const VOCAB_SIZE = FIRST_PRINTABLE + 95

/** char code -> id, or -1 */
const charToId = (code: number): number => {
  if (code === 10) return NEWLINE
  if (code >= 32 && code <= 126) return code - 32 + FIRST_PRINTABLE
  return -1
}

/** Plain (non-Effect) encoder: ids, or the index of the first unknown character. @since 0.1.0 @category combinators */
export const encodeChars = (text: string): { readonly ids: Array<number> } | { readonly badIndex: number } => {
  const ids: Array<number> = new Array(text.length)
  for (let i = 0; i < text.length; i++) {
    const id = charToId(text.charCodeAt(i))
    if (id < 0) return { badIndex: i }
    ids[i] = id
  }
  return { ids }
}

/** Ids -> text; special and out-of-range ids are dropped. @since 0.1.0 @category combinators */
export const decodeChars = (tokens: ReadonlyArray<number>): string => {
  let out = ""
  for (const t of tokens) {
    if (t === NEWLINE) out += "\n"
    else if (t >= FIRST_PRINTABLE && t < VOCAB_SIZE) out += String.fromCharCode(t - FIRST_PRINTABLE + 32)
  }
  return out
}

const describeChar = (ch: string): string => {
  const code = ch.codePointAt(0) ?? 0
  return `${JSON.stringify(ch)} (U+${code.toString(16).toUpperCase().padStart(4, "0")})`
}

/** @since 0.1.0 @category constructors */
export const make = (): TokenizerShape => ({
  name: "char-ascii",
  vocabSize: VOCAB_SIZE,
  bos: BOS,
  eos: EOS,
  encode: (text) => {
    const r = encodeChars(text)
    if ("ids" in r) return Effect.succeed(r.ids)
    return Effect.fail(
      new TokenizeError({
        message: `cannot encode character ${describeChar(text.slice(r.badIndex, r.badIndex + 1))} at position ${r.badIndex}: the vocabulary is printable ASCII (32..126) and newline`,
      }),
    )
  },
  decode: decodeChars,
  renderPrompt: (prompt: Prompt) =>
    Effect.succeed(typeof prompt === "string" ? prompt : prompt.map((m) => m.content).join("\n")),
})
