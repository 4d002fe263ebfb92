/**
 * A run's chat-template arguments: the env's (`Env.make({ chat: { templateArgs } })`)
 * under `--template-arg`, recorded in config.json, kept on `--resume`, and handed to
 * every chat prompt the run renders. Mixture members that disagree, and bad arguments,
 * are refused, naming them.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { Env } from "gyre"
import { settingsFrom } from "../../src/app/RunOptions.ts"
import { readSaved } from "../../src/app/Training.ts"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import { Local } from "../../src/backends/local/index.ts"
import * as RunFolder from "../../src/folder/RunFolder.ts"
import * as Runner from "../../src/Runner.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Tokenizer, type TokenizerShape } from "../../src/services/Tokenizer.ts"
import { Trainer } from "../../src/services/Trainer.ts"
import { tinyConfig, tinyLora } from "../backends/local/helpers.ts"
import vowels, { quiet } from "../envs/vowels.ts"

/** vowels with chat prompts and Qwen3's switch for answers without thinking. */
const chatty = Env.make({
  ...vowels,
  name: "chatty",
  prompt: ({ n }) => [{ role: "user", content: `Say ${n}:` }],
  chat: { templateArgs: { enable_thinking: false } },
})

/**
 * A test double of the `Tokenizer` service, written from its public shape: the char
 * tokenizer with a chat "template" that renders the messages' text and records the
 * template arguments each rendering was given.
 */
const recordingTokenizer = (seen: Array<unknown>): TokenizerShape => {
  const char = CharTokenizer.make()
  return {
    ...char,
    renderPrompt: (prompt) => (typeof prompt === "string" ? Effect.succeed(prompt) : Effect.sync(() => (seen.push("no template arguments"), prompt.map((m) => m.content).join("\n")))),
    renderChat: (messages, options) => Effect.sync(() => (seen.push(options.templateArgs), messages.map((m) => String(m.content)).join("\n"))),
  }
}

const tmp = () => Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-template-args-"))
const oneStep = { steps: 1, groups: 1, groupSize: 2, saveEvery: 0, evalEvery: 0 }

describe("a run's chat-template arguments", () => {
  it.live("the env's reach every prompt, config.json records them, --resume keeps them and --template-arg adds to them", () =>
    Effect.gen(function* () {
      const out = tmp()
      const settings = yield* settingsFrom({ ...oneStep, out, name: "t" }, chatty, undefined, undefined, undefined)
      assert.deepStrictEqual(settings.templateArgs, { enable_thinking: false })
      const seen: Array<unknown> = []
      const s = yield* Local.make({ config: tinyConfig, lora: tinyLora, seed: 3, stateDir: RunFolder.paths(settings.outDir).state })
      yield* Runner.run(settings, chatty).pipe(
        quiet,
        Effect.provideService(Trainer, s.trainer),
        Effect.provideService(Sampler, s.sampler),
        Effect.provideService(Tokenizer, recordingTokenizer(seen)),
      )
      assert.isAbove(seen.length, 0)
      assert.deepStrictEqual(new Set(seen.map((a) => JSON.stringify(a))), new Set([JSON.stringify({ enable_thinking: false })]))
      const saved = yield* readSaved(settings.outDir)
      assert.deepStrictEqual(saved.templateArgs, { enable_thinking: false })
      // --resume keeps them; a flag given with it overrides or adds
      const resumed = yield* settingsFrom({}, chatty, undefined, saved, settings.outDir)
      assert.deepStrictEqual(resumed.templateArgs, { enable_thinking: false })
      const flagged = yield* settingsFrom({ templateArgs: { enable_thinking: true, style: "short" } }, chatty, undefined, saved, settings.outDir)
      assert.deepStrictEqual(flagged.templateArgs, { enable_thinking: true, style: "short" })
    }).pipe(Effect.scoped))

  it.effect("--template-arg overrides the env's; none at all records nothing", () =>
    Effect.gen(function* () {
      const flagged = yield* settingsFrom({ templateArgs: { enable_thinking: true } }, chatty, undefined, undefined, undefined)
      assert.deepStrictEqual(flagged.templateArgs, { enable_thinking: true })
      const plain = yield* settingsFrom({}, vowels, undefined, undefined, undefined)
      assert.isFalse("templateArgs" in plain)
      const bad = yield* Effect.flip(settingsFrom({ templateArgs: { add_generation_prompt: false } }, vowels, undefined, undefined, undefined))
      assert.include(bad.message, "--template-arg: add_generation_prompt is set by gyre itself")
    }))

  it.effect("a mixture takes its members' arguments; members that disagree are refused, naming both", () =>
    Effect.gen(function* () {
      const other = Env.make({ ...vowels, name: "other", chat: { templateArgs: { style: "short" } } })
      const agreed = yield* settingsFrom({}, Env.mixture("mix", [[chatty, 1], [other, 1]]), undefined, undefined, undefined)
      assert.deepStrictEqual(agreed.templateArgs, { enable_thinking: false, style: "short" })
      const thinking = Env.make({ ...vowels, name: "thinking", chat: { templateArgs: { enable_thinking: true } } })
      const clash = yield* Effect.flip(settingsFrom({}, Env.mixture("mix", [[chatty, 1], [thinking, 1]]), undefined, undefined, undefined))
      assert.include(clash.message, "the envs of mixture mix disagree on chat template argument enable_thinking: chatty sets false, thinking true")
      // the flag settles it
      const settled = yield* settingsFrom({ templateArgs: { enable_thinking: true } }, Env.mixture("mix", [[chatty, 1], [thinking, 1]]), undefined, undefined, undefined)
      assert.deepStrictEqual(settled.templateArgs, { enable_thinking: true })
    }).pipe(Effect.exit, Effect.map((exit) => assert.isTrue(Exit.isSuccess(exit), String(exit)))))

  it("Env.make refuses template arguments that are not JSON, naming the field", () => {
    assert.throws(() => Env.make({ ...vowels, name: "bad", chat: { templateArgs: { when: new Date(0) } } }), /Env.make\("bad"\): chat.templateArgs.when must be a JSON value/)
  })
})
