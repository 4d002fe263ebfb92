/**
 * Decoding the ids of a byte-level BPE tokenizer (GPT-2's scheme: Qwen's, Llama 3's) with
 * each token's bytes worked out once: the text is the same as the library's
 * `decode(ids, { skip_special_tokens: true })`, without its per-call work (a string per
 * token, an array of every character, a linear search of the special and added tokens
 * per token). Every completion and observation of a run is decoded, so this is on the
 * rollouts' hot path.
 *
 * Used when `tokenizer.json`'s decoder is `ByteLevel` and its model adds no end-of-word
 * suffix; other tokenizers decode with the library as before.
 *
 * @since 0.1.0
 */
import { Option, Schema } from "effect"

/** The fields of `tokenizer.json` that decoding reads. */
const DecodeJson = Schema.Struct({
  decoder: Schema.NullOr(Schema.Struct({ type: Schema.String })),
  model: Schema.Struct({ end_of_word_suffix: Schema.optional(Schema.NullOr(Schema.String)) }),
  added_tokens: Schema.Array(Schema.Struct({ content: Schema.String, special: Schema.optional(Schema.Boolean) })),
})

/** The fields of `tokenizer_config.json` that decoding reads (the library reads the same). */
const DecodeConfig = Schema.Struct({
  additional_special_tokens: Schema.optional(Schema.Array(Schema.Unknown)),
  clean_up_tokenization_spaces: Schema.optional(Schema.NullOr(Schema.Boolean)),
})

/** GPT-2's map back from the printable characters of byte-level tokens to their bytes. */
const unicodeToBytes = (): Map<number, number> => {
  const bs: Array<number> = []
  for (let b = 33; b <= 126; b++) bs.push(b)
  for (let b = 161; b <= 172; b++) bs.push(b)
  for (let b = 174; b <= 255; b++) bs.push(b)
  const cs = [...bs]
  let n = 0
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b)
      cs.push(256 + n++)
    }
  }
  return new Map(cs.map((c, i) => [c, bs[i]!]))
}

/** The library's clean-up of spaces before punctuation (`clean_up_tokenization_spaces`). */
const cleanUp = (text: string): string =>
  text.replace(/ \./g, ".").replace(/ \?/g, "?").replace(/ !/g, "!").replace(/ ,/g, ",").replace(/ ' /g, "'").replace(/ n't/g, "n't")
    .replace(/ 'm/g, "'m").replace(/ 's/g, "'s").replace(/ 've/g, "'ve").replace(/ 're/g, "'re")

/** What one id decodes to: skipped (a special token), its text as it is (an added token), or its bytes. */
type Entry = { readonly _tag: "Skip" } | { readonly _tag: "Text"; readonly text: string } | { readonly _tag: "Bytes"; readonly bytes: Uint8Array }

const SKIP: Entry = { _tag: "Skip" }

/**
 * A decoder of `ids` to text for a byte-level tokenizer, or none when `json` is not one
 * (see the module's comment). `idToToken` is the library's `id_to_token`; `fallback`, the
 * library's decode, takes ids that are not in the vocabulary (it says what is wrong).
 * No ids decode to the empty text.
 * @since 0.1.0 @category constructors
 */
export const byteLevelDecoder = (
  json: unknown,
  config: unknown,
  idToToken: (id: number) => string | undefined,
  fallback: (ids: ReadonlyArray<number>) => string,
): ((ids: ReadonlyArray<number>) => string) | undefined => {
  const spec = Schema.decodeUnknownOption(DecodeJson)(json)
  const settings = Schema.decodeUnknownOption(DecodeConfig)(config)
  if (Option.isNone(spec) || Option.isNone(settings)) return undefined
  const { decoder, model, added_tokens } = spec.value
  if (decoder?.type !== "ByteLevel" || (model.end_of_word_suffix ?? "") !== "") return undefined
  // as the library: special tokens are dropped, other added tokens are their text; both by the token's text
  const special = new Set<unknown>([...added_tokens.filter((t) => t.special === true).map((t) => t.content), ...(settings.value.additional_special_tokens ?? [])])
  const added = new Set(added_tokens.map((t) => t.content))
  const clean = settings.value.clean_up_tokenization_spaces ?? true
  const byteOf = unicodeToBytes()
  const entries: Array<Entry | undefined> = []
  const entryOf = (id: number): Entry | undefined => {
    const token = idToToken(id)
    if (token === undefined) return undefined
    if (special.has(token)) return SKIP
    if (added.has(token)) return { _tag: "Text", text: token }
    const bytes: Array<number> = []
    // a character outside the byte alphabet is byte 0, as in the library
    for (const c of token) bytes.push(byteOf.get(c.codePointAt(0)!) ?? 0)
    return { _tag: "Bytes", bytes: Uint8Array.from(bytes) }
  }
  const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true })
  let scratch = new Uint8Array(4096)
  return (ids) => {
    let text = ""
    let n = 0
    // the bytes between added tokens decode as one run, as in the library
    const flush = () => {
      if (n > 0) text += utf8.decode(scratch.subarray(0, n))
      n = 0
    }
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!
      let entry = entries[id]
      if (entry === undefined) {
        entry = Number.isInteger(id) && id >= 0 ? entryOf(id) : undefined
        if (entry === undefined) return fallback(ids)
        entries[id] = entry
      }
      if (entry._tag === "Skip") continue
      if (entry._tag === "Text") {
        flush()
        text += entry.text
        continue
      }
      const bytes = entry.bytes
      if (n + bytes.length > scratch.length) {
        const grown = new Uint8Array(Math.max(scratch.length * 2, n + bytes.length))
        grown.set(scratch.subarray(0, n))
        scratch = grown
      }
      // tokens are a few bytes: a loop beats `set` at this size
      for (let j = 0; j < bytes.length; j++) scratch[n++] = bytes[j]!
    }
    flush()
    return clean ? cleanUp(text) : text
  }
}
