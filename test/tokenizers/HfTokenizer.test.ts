import { afterAll, assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as Tokenizers from "../../src/tokenizers/index.ts"
import { encodePrompt, Tokenizer } from "../../src/services/Tokenizer.ts"

/** GPT-2's byte -> printable character map (byte-level BPE). */
const bytesToUnicode = (): Map<number, string> => {
  const bs: Array<number> = []
  for (let b = 33; b <= 126; b++) bs.push(b)
  for (let b = 161; b <= 172; b++) bs.push(b)
  for (let b = 174; b <= 255; b++) bs.push(b)
  const cs = [...bs]
  let n = 0
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b)
      cs.push(256 + n)
      n++
    }
  }
  return new Map(bs.map((b, i) => [b, String.fromCharCode(cs[i]!)]))
}

const MERGES = ["h e", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d"]
const SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>"]

/** A tiny byte-level BPE tokenizer (the 256 bytes, a few merges, chat specials). */
const writeTokenizer = (dir: string, config: Record<string, unknown>) => {
  const byteMap = bytesToUnicode()
  const vocab: Record<string, number> = {}
  for (let b = 0; b < 256; b++) vocab[byteMap.get(b)!] = b
  let next = 256
  for (const m of MERGES) vocab[m.replace(" ", "")] = next++
  const added = SPECIALS.map((content) => ({ id: next++, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }))
  const json = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: MERGES,
    },
  }
  fs.mkdirSync(dir, { recursive: true })
  fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(json))
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify(config))
  return { vocab, ids: Object.fromEntries(added.map((a) => [a.content, a.id])) as Record<string, number> }
}

const CHATML =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

const LLAMA_LIKE =
  "{{ bos_token }}{% for message in messages %}[{{ message['role'] }}] {{ message['content'] }}{{ eos_token }}{% endfor %}" +
  "{% if add_generation_prompt %}[assistant] {% endif %}"

const root = fs.mkdtempSync(path.join(os.tmpdir(), "gyre-tok-"))
let made = 0
const tmp = () => fs.mkdtempSync(path.join(root, `${made++}-`))
afterAll(() => fs.rmSync(root, { recursive: true, force: true }))

describe("Hugging Face tokenizers from a folder", () => {
  it.effect("encodes, decodes and renders a ChatML template with add_generation_prompt", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const { vocab, ids } = writeTokenizer(dir, { bos_token: null, eos_token: "<|im_end|>", chat_template: CHATML, name_or_path: "tiny-chatml" })
      const tok = yield* Tokenizer.pipe(Effect.provide(Tokenizers.layer(dir)))
      assert.strictEqual(tok.name, "tiny-chatml")
      assert.strictEqual(tok.bos, undefined)
      assert.strictEqual(tok.eos, ids["<|im_end|>"])
      assert.strictEqual(tok.vocabSize, 256 + MERGES.length + SPECIALS.length)
      // merges apply: "hello world" -> [hello, Ġworld]
      assert.deepStrictEqual(yield* tok.encode("hello world"), [vocab["hello"], vocab["Ġworld"]])
      assert.strictEqual(tok.decode([vocab["hello"]!, vocab["Ġworld"]!]), "hello world")
      // bytes outside the merges still encode, and round trip
      const text = "héllo, wörld! 12"
      assert.strictEqual(tok.decode(yield* tok.encode(text)), text)
      const rendered = yield* tok.renderPrompt([
        { role: "system", content: "be brief" },
        { role: "user", content: "hello" },
      ])
      assert.strictEqual(rendered, "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n")
      const prompt = yield* encodePrompt(tok, [{ role: "user", content: "hello" }])
      assert.strictEqual(prompt[0], ids["<|im_start|>"])
      assert.include(prompt, vocab["hello"]!)
      assert.strictEqual(prompt.filter((t) => t === ids["<|im_end|>"]).length, 1)
      // special tokens are dropped on decode
      assert.strictEqual(tok.decode(prompt), "user\nhello\nassistant\n")
      // text prompts are left alone
      assert.strictEqual(yield* tok.renderPrompt("hello"), "hello")
    }),
  )

  it.effect("a template that renders bos_token does not give the prompt two BOS tokens", () =>
    Effect.gen(function* () {
      const dir = tmp()
      const { ids } = writeTokenizer(dir, { bos_token: { content: "<s>" }, eos_token: "<|endoftext|>", chat_template: [{ name: "default", template: LLAMA_LIKE }] })
      const tok = yield* Tokenizers.fromDirectory(dir)
      assert.strictEqual(tok.bos, ids["<s>"])
      const prompt = yield* encodePrompt(tok, [{ role: "user", content: "hello" }])
      assert.strictEqual(prompt.filter((t) => t === ids["<s>"]).length, 1)
      assert.strictEqual(prompt[0], ids["<s>"])
      assert.strictEqual(yield* tok.renderPrompt([{ role: "user", content: "hello" }]), "[user] hello<|endoftext|>[assistant] ")
    }),
  )

  it.effect("chat_template.jinja is used when the config has no template", () =>
    Effect.gen(function* () {
      const dir = tmp()
      writeTokenizer(dir, { eos_token: "<|im_end|>" })
      fs.writeFileSync(path.join(dir, "chat_template.jinja"), CHATML)
      const tok = yield* Tokenizers.fromDirectory(dir)
      assert.strictEqual(yield* tok.renderPrompt([{ role: "user", content: "hi" }]), "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    }),
  )

  it.effect("typed errors: a missing folder, a bad config, no template for a chat prompt", () =>
    Effect.gen(function* () {
      const missing = yield* Effect.flip(Tokenizers.fromDirectory(path.join(tmp(), "nope")))
      assert.strictEqual(missing.reason, "Missing")
      const dir = tmp()
      writeTokenizer(dir, { eos_token: "<|no_such_token|>" })
      const bad = yield* Effect.flip(Tokenizers.fromDirectory(dir))
      assert.strictEqual(bad.reason, "Malformed")
      assert.include(bad.message, "eos_token")
      const dir2 = tmp()
      writeTokenizer(dir2, { eos_token: "<|im_end|>" })
      const tok = yield* Tokenizers.fromDirectory(dir2)
      const noTemplate = yield* Effect.flip(tok.renderPrompt([{ role: "user", content: "hi" }]))
      assert.include(noTemplate.message, "no chat template")
      const dir3 = tmp()
      writeTokenizer(dir3, { eos_token: "<|im_end|>", chat_template: "{% for m in messages %}" })
      const broken = yield* Effect.flip(Tokenizers.fromDirectory(dir3))
      assert.strictEqual(broken.reason, "Malformed")
    }),
  )
})
