/**
 * Encoding with each pre-tokenized word's ids kept: a byte-level BPE tokenizer (Qwen's,
 * Llama 3's) splits text into words with a regex and encodes each word by itself, so a
 * word's ids are the same wherever it appears. The library maps every word to its byte
 * characters and looks it up again on every call (most of an encode's time); here a word
 * seen before is one map lookup. Observations, prompts and the agent endpoint's messages
 * are encoded on the rollouts' hot path, and their words repeat.
 *
 * The steps are the library's own (`encode_text` of `@huggingface/tokenizers`): its added
 * token splitting, normalizer, regex split and, for a new word, its byte mapping and BPE
 * model; only the word -> ids step is remembered. Used when the tokenizer's pipeline is
 * exactly that (`Split` then `ByteLevel` without its own regex, BPE without dropout or
 * unknown-token fusing, no post-processor that adds tokens); others encode with the
 * library as before.
 *
 * @since 0.1.0
 */

/** A step of the library's pipeline: words in, words (or tokens) out. */
type Step = (words: Array<string>) => Array<string>

/** The parts of the library's tokenizer that its `encode_text` uses (fields of version 0.2's `Tokenizer`). */
interface Library {
  readonly splitter_unnormalized: { readonly split: (text: string) => Array<string> }
  readonly splitter_normalized: { readonly split: (text: string) => Array<string> }
  readonly added_tokens_map: Map<string, { readonly id: number; readonly lstrip?: boolean; readonly rstrip?: boolean }>
  readonly normalizer: ((text: string) => string) | null
  readonly pre_tokenizer: { readonly tokenizers?: ReadonlyArray<unknown> }
  readonly model: Step & { readonly tokens_to_ids: Map<string, number>; readonly unk_token_id?: number }
  readonly remove_space?: boolean
  readonly do_lowercase_and_remove_accent?: boolean
}

/** The words kept at most; past it the cache starts over (a run's words are far fewer). */
const CAPACITY = 1 << 17

/** Longer words are not kept (as the library's own BPE cache): a run of letters can be a whole file. */
const LONGEST_KEPT = 256

const isFn = (x: unknown): x is (...args: Array<unknown>) => unknown => typeof x === "function"

/** The library's pieces this path needs, when its pipeline is the one described in the module's comment. */
const partsOf = (library: unknown, json: unknown) => {
  const lib = library as Partial<Library>
  const spec = json as { readonly pre_tokenizer?: { readonly type?: string; readonly pretokenizers?: ReadonlyArray<Record<string, unknown>> }; readonly model?: Record<string, unknown>; readonly post_processor?: { readonly type?: string } | null }
  const steps = spec.pre_tokenizer?.type === "Sequence" ? spec.pre_tokenizer.pretokenizers ?? [] : []
  const [splitSpec, bytes] = steps
  const fits = steps.length === 2 && splitSpec?.["type"] === "Split" && bytes?.["type"] === "ByteLevel" && bytes["use_regex"] === false && bytes["add_prefix_space"] !== true &&
    spec.model?.["type"] === "BPE" && spec.model["dropout"] == null && spec.model["fuse_unk"] !== true &&
    (spec.post_processor == null || spec.post_processor.type === "ByteLevel")
  const [splitStep, byteStep] = lib.pre_tokenizer?.tokenizers ?? []
  if (!fits || lib.remove_space === true || lib.do_lowercase_and_remove_accent === true) return undefined
  if (!isFn(splitStep) || !isFn(byteStep) || !isFn(lib.model) || !(lib.model.tokens_to_ids instanceof Map) || !(lib.added_tokens_map instanceof Map)) return undefined
  if (!isFn(lib.splitter_unnormalized?.split) || !isFn(lib.splitter_normalized?.split)) return undefined
  // the split of one text, without the library's array-of-texts wrapping (`pre_tokenize`'s map and flat)
  const splitOne = (splitStep as { readonly pre_tokenize_text?: unknown }).pre_tokenize_text
  const split: (text: string) => Array<string> = isFn(splitOne) ? (text) => splitOne.call(splitStep, text) as Array<string> : (text) => (splitStep as Step)([text])
  return { lib: lib as Library, split, byteStep: byteStep as Step, model: lib.model as Step }
}

/** The library's handling of an added token's `lstrip` / `rstrip`: the whitespace next to it goes. */
const stripAround = (sections: Array<string>, added: Library["added_tokens_map"]) => {
  sections.forEach((section, i) => {
    const token = added.get(section)
    if (token === undefined) return
    if (token.lstrip === true && i > 0) sections[i - 1] = sections[i - 1]!.trimEnd()
    if (token.rstrip === true && i < sections.length - 1) sections[i + 1] = sections[i + 1]!.trimStart()
  })
}

/**
 * An encoder of text to ids (no special tokens added) that keeps each word's ids, or none
 * when the tokenizer's pipeline is not the one it reproduces (see the module's comment).
 * `library` is the loaded `@huggingface/tokenizers` `Tokenizer`, `json` its `tokenizer.json`.
 * @since 0.1.0 @category constructors
 */
export const wordCachedEncoder = (library: unknown, json: unknown): ((text: string) => Array<number>) | undefined => {
  const parts = partsOf(library, json)
  if (parts === undefined) return undefined
  const { lib, split, byteStep, model } = parts
  const added = lib.added_tokens_map
  const toIds = lib.model.tokens_to_ids
  const unk = lib.model.unk_token_id
  let words = new Map<string, ReadonlyArray<number>>()
  const idsOfWord = (word: string): ReadonlyArray<number> => {
    let ids = words.get(word)
    if (ids !== undefined) return ids
    // a new word: the library's byte mapping and BPE model, then its token -> id lookup
    const tokens = model(byteStep([word]))
    ids = tokens.map((t) => added.get(t)?.id ?? toIds.get(t) ?? unk!)
    if (word.length >= LONGEST_KEPT) return ids
    if (words.size >= CAPACITY) words = new Map()
    words.set(word, ids)
    return ids
  }
  const push = (out: Array<number>, ids: ReadonlyArray<number>) => {
    for (let i = 0; i < ids.length; i++) out.push(ids[i]!)
  }
  const section = (out: Array<number>, text: string) => {
    if (text.length === 0) return
    const token = added.get(text)
    if (token !== undefined) return void out.push(token.id)
    const normalized = lib.normalizer === null ? text : lib.normalizer(text)
    if (normalized.length === 0) return
    const subsections = lib.splitter_normalized.split(normalized)
    stripAround(subsections, added)
    for (const sub of subsections) {
      if (sub.length === 0) continue
      const subToken = added.get(sub)
      if (subToken !== undefined) out.push(subToken.id)
      else for (const word of split(sub)) push(out, idsOfWord(word))
    }
  }
  return (text) => {
    const out: Array<number> = []
    const sections = lib.splitter_unnormalized.split(text)
    stripAround(sections, added)
    for (const s of sections) section(out, s)
    return out
  }
}
