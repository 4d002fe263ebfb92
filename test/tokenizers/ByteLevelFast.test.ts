/**
 * The byte-level fast paths (`ByteLevelDecode.ts`, `WordCache.ts`) give the library's own
 * ids and text on Qwen3's tokenizer, for any text (words, whitespace, special and added
 * tokens, accents that NFC composes, emoji, CJK) and any ids (special tokens, added tokens,
 * bytes that cut a character in two); tokenizers whose pipeline differs keep the library.
 */
import { assert, describe, it } from "@effect/vitest"
import { Tokenizer as Library } from "@huggingface/tokenizers"
import { Effect } from "effect"
import * as fc from "fast-check"
import * as fs from "node:fs"
import * as path from "node:path"
import { byteLevelDecoder } from "../../src/tokenizers/ByteLevelDecode.ts"
import * as Tokenizers from "../../src/tokenizers/index.ts"
import { wordCachedEncoder } from "../../src/tokenizers/WordCache.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import { QWEN3_DIR } from "../backends/http/ClientWorkloads.ts"

const json = JSON.parse(fs.readFileSync(path.join(QWEN3_DIR, "tokenizer.json"), "utf8")) as Record<string, unknown>
const config = JSON.parse(fs.readFileSync(path.join(QWEN3_DIR, "tokenizer_config.json"), "utf8")) as Record<string, unknown>
const library = new Library(json, config)
const libraryEncode = (text: string) => library.encode(text, { add_special_tokens: false }).ids
const libraryDecode = (ids: ReadonlyArray<number>) => library.decode([...ids], { skip_special_tokens: true })

const encode = wordCachedEncoder(library, json)
const decode = byteLevelDecoder(json, config, (id) => library.id_to_token(id), libraryDecode)

const fragment = fc.oneof(
  fc.constantFrom(
    "hello", " world", "The answer is 463.", "\n", "\n\n", "  ", "\t", " \r\n", "<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|nope|>", "<tool_call>",
    "</tool_response>", "<think>", "{\"expression\": \"121+340\"}", "e\u0301", "é", "Ω", "😀", "数学", "'s", "'LL", "12345", "3.14", "café", "\u00a0", "don't",
  ),
  fc.string({ unit: "grapheme", maxLength: 6 }),
  fc.string({ unit: "binary", maxLength: 4 }),
)
const texts = fc.array(fragment, { maxLength: 40 }).map((parts) => parts.join(""))

const added = (json["added_tokens"] as ReadonlyArray<{ readonly id: number }>).map((t) => t.id)
const vocabSize = Math.max(...added) + 1
const ids = fc.array(fc.oneof({ arbitrary: fc.integer({ min: 0, max: vocabSize - 1 }), weight: 5 }, { arbitrary: fc.constantFrom(...added), weight: 1 }), { minLength: 1, maxLength: 60 })

describe("byte-level fast paths (Qwen3)", () => {
  it("apply to Qwen3's tokenizer", () => {
    assert.isDefined(encode)
    assert.isDefined(decode)
  })

  it("encode to the library's ids, for any text", () => {
    fc.assert(fc.property(texts, (text) => assert.deepStrictEqual(encode!(text), libraryEncode(text), JSON.stringify(text))), { numRuns: 1500, seed: 7 })
  })

  it("encode a text the same the second time (from the kept words) as the first", () => {
    // a word too long to keep (a run of letters as long as a file) is encoded each time
    for (const text of ["First I restate what is known: two orders of boxes were placed in consecutive weeks.", `x ${"abcdefghij".repeat(100)} y`]) {
      const first = encode!(text)
      assert.deepStrictEqual(encode!(text), first)
      assert.deepStrictEqual(first, libraryEncode(text))
    }
  })

  it("decode to the library's text, for any ids", () => {
    fc.assert(fc.property(ids, (xs) => assert.strictEqual(decode!(xs), libraryDecode(xs), JSON.stringify(xs))), { numRuns: 1500, seed: 8 })
  })

  it("decode what encoding gave back to the library's text", () => {
    fc.assert(fc.property(texts, (text) => {
      const xs = libraryEncode(text)
      if (xs.length > 0) assert.strictEqual(decode!(xs), libraryDecode(xs))
    }), { numRuns: 500, seed: 9 })
  })

  it("decode ids outside the vocabulary as the library does (it refuses them)", () => {
    assert.throws(() => decode!([1.5]))
    assert.strictEqual(decode!([vocabSize + 10, 9707]), libraryDecode([vocabSize + 10, 9707]))
  })

  it.effect("back the tokenizer service: no ids decode to the empty text", () =>
    Effect.gen(function* () {
      const tokenizer = yield* Tokenizer
      assert.strictEqual(tokenizer.decode([]), "")
      assert.strictEqual(tokenizer.decode([tokenizer.eos]), "")
      const text = "<|im_start|>user\nThe answer is 463.<|im_end|>"
      assert.deepStrictEqual(yield* tokenizer.encode(text), libraryEncode(text))
    }).pipe(Effect.provide(Tokenizers.layer(QWEN3_DIR))))
})

describe("byte-level fast paths on other pipelines", () => {
  it("keep the library for encoding where the pre-tokenizer is not Split then ByteLevel", () => {
    const gpt2Like = { ...json, pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true } }
    assert.isUndefined(wordCachedEncoder(new Library(gpt2Like, config), gpt2Like))
    const dropout = { ...json, model: { ...(json["model"] as object), dropout: 0.1 } }
    assert.isUndefined(wordCachedEncoder(library, dropout))
  })

  it("keep the library for decoding where the decoder is not ByteLevel", () => {
    assert.isUndefined(byteLevelDecoder({ ...json, decoder: { type: "Metaspace" } }, config, () => undefined, () => ""))
    assert.isUndefined(byteLevelDecoder({ ...json, decoder: null }, config, () => undefined, () => ""))
  })

  it("clean up spaces before punctuation where the config asks, as the library does", () => {
    const cleaning = { ...config, clean_up_tokenization_spaces: true }
    const lib = new Library(json, cleaning)
    const fast = byteLevelDecoder(json, cleaning, (id) => lib.id_to_token(id), () => "")!
    const xs = lib.encode("Yes . I do n't know , do you ? It 's fine !", { add_special_tokens: false }).ids
    assert.strictEqual(fast(xs), lib.decode(xs, { skip_special_tokens: true }))
    assert.notStrictEqual(fast(xs), decode!(xs))
  })
})
