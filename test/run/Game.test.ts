/**
 * Game envs: the definition's checks; games played move by move on a scripted sampler
 * (a test double: each answer computed from the view), each policy role a sample with its
 * moves and outcome, illegal moves ending the game, scripted players in evaluation;
 * advantages normalized per role; and a run of `envs/nim.ts` through the runner.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Schema } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import nim, { taken } from "../../envs/nim.ts"
import { FrozenPlayers } from "../../src/game/Frozen.ts"
import * as CharTokenizer from "../../src/backends/local/CharTokenizer.ts"
import * as Env from "../../src/vocabulary/Env.ts"
import * as Game from "../../src/vocabulary/Game.ts"
import { ContextLength } from "../../src/run/Rollout.ts"
import { playGames } from "../../src/run/GameRollout.ts"
import { advantages } from "../../src/run/Train.ts"
import { defaults } from "../../src/run/Settings.ts"
import { Sampler } from "../../src/services/Sampler.ts"
import { Tokenizer } from "../../src/services/Tokenizer.ts"
import { train } from "../../src/app/Training.ts"
import { scriptedSampler } from "./ScriptedSampler.ts"

const play = (env: Env.AnyEnv, problem: unknown, reply: (view: string) => string, split: Env.Split = "train", games = 2) =>
  playGames({ env, task: { key: "k", env: env.name, problem }, sampling: { maxTokens: 3, temperature: 1, seed: 1 }, numSamples: games, affinityKey: "a", version: 0, step: 0, split }).pipe(
    Effect.provideService(Tokenizer, CharTokenizer.make()),
    Effect.provideService(Sampler, scriptedSampler((prompt) => reply(prompt)).service),
    Effect.provideService(ContextLength, 48),
  )
const stonesIn = (view: string) => Number(/(\d+) stones/.exec(view)![1])

/** Nim's rules as a spec, without envs/nim.ts's dealer, for exact games and variants with other players. */
type NimState = { readonly stones: number; readonly next: "first" | "second"; readonly winner?: "first" | "second" }
const nimSpec = {
  problem: Schema.Struct({ stones: Schema.Int, table: Schema.Int }),
  source: Env.seeded(({ random }) => ({ stones: random.int(3, 9), table: random.int(0, 999) })),
  roles: ["first", "second"],
  start: (p: { readonly stones: number }): NimState => ({ stones: p.stones, next: "first" }),
  toMove: (s: NimState) => s.next,
  view: (s: NimState) => `Nim: ${s.stones} stones, take 1 to 3. Left:`,
  move: (s: NimState, role: string, text: string): Game.MoveResult<NimState> => {
    const n = taken(text, s.stones)
    const other = role === "first" ? "second" : "first"
    if (n === undefined) return { illegal: "no move" }
    return { state: s.stones - n === 0 ? { stones: 0, next: other, winner: role as "first" | "second" } : { stones: s.stones - n, next: other } }
  },
  outcome: (s: NimState) => (s.winner === undefined ? undefined : { [s.winner]: 1, [s.winner === "first" ? "second" : "first"]: -1 }),
  sampling: { maxTokens: 3, temperature: 1 },
} as const
const plainNim = () => Game.env({ ...nimSpec, name: "nim-plain", illegal: (_: NimState, role: string) => ({ [role]: -1, [role === "first" ? "second" : "first"]: 0 }) })

describe("Game.env", () => {
  const base = { name: "g", problem: Schema.Struct({}), source: Env.rows([{}]), start: () => 0, toMove: () => "a", view: () => "", move: () => ({ state: 0 }), outcome: () => undefined }
  it("checks its roles and players", () => {
    assert.throws(() => Game.env({ ...base, roles: ["a"] }), /roles must name two or more distinct roles/)
    assert.throws(() => Game.env({ ...base, roles: ["a", "b"], players: { c: "policy" } }), /players names "c", which is not a role \(a, b\)/)
    const scripted = Game.scripted(() => "1")
    assert.throws(() => Game.env({ ...base, roles: ["a", "b"], players: { a: scripted, b: scripted } }), /players must leave at least one role to the policy/)
    assert.throws(() => Game.env({ ...base, roles: ["a", "b"], evalPlayers: { a: scripted, b: scripted } }), /evalPlayers must leave at least one role to the policy/)
    // by default an illegal move loses: -1 for its maker, 1 for every other role
    assert.deepStrictEqual(Game.env({ ...base, roles: ["a", "b", "c"] }).game!.illegal(0, "b"), { a: 1, b: -1, c: 1 })
  })
})

describe("playing games", () => {
  it.effect("self-play: both roles are samples, role by role, with their moves, what the other did, and their outcomes", () =>
    Effect.gen(function* () {
      // every move takes one stone: from 5, first takes the last one and wins
      const played = yield* play(plainNim(), { stones: 5, table: 0 }, (view) => ` ${stonesIn(view) - 1}`)
      assert.deepStrictEqual(played.roles, ["first", "first", "second", "second"])
      assert.deepStrictEqual(played.outcomes, [1, 1, -1, -1])
      const [first, , second] = played.episodes
      assert.deepStrictEqual(first!.turns.map((t) => [t.text, t.observation]), [[" 4", "second:  3\n"], [" 2", "second:  1\n"], [" 0", undefined]])
      assert.deepStrictEqual(second!.turns.map((t) => t.text), [" 3", " 1"])
      // each move is its own prompt: the mover's view
      assert.strictEqual(CharTokenizer.decodeChars(second!.turns[0]!.input.slice(1)), "Nim: 4 stones, take 1 to 3. Left:")
    }))

  it.effect("envs/nim.ts: a scripted dealer takes 0 to 3 stones first, so a group's games start from different piles; only the policy's roles are samples", () =>
    Effect.gen(function* () {
      const views: Array<number> = []
      const played = yield* play(nim, { stones: 9, table: 0 }, (view) => {
        views.push(stonesIn(view))
        return ` ${stonesIn(view) - 1}`
      }, "train", 8)
      assert.deepStrictEqual([...new Set(played.roles)], ["first", "second"])
      const firstPiles = new Set(played.episodes.slice(0, 8).map((e) => CharTokenizer.decodeChars(e.turns[0]!.input.slice(1))))
      assert.isAbove(firstPiles.size, 1, "the games start from different piles")
      for (const n of views) assert.isAtMost(n, 9)
    }))

  it.effect("an illegal move ends the game with nim's outcomes (-1 for its maker, 0 for the other); the reason is kept with the move", () =>
    Effect.gen(function* () {
      const played = yield* play(plainNim(), { stones: 9, table: 0 }, (view) => (stonesIn(view) === 8 ? " x" : ` ${stonesIn(view) - 1}`))
      assert.deepStrictEqual(played.outcomes, [0, 0, -1, -1])
      const second = played.episodes[2]!
      assert.deepStrictEqual([second.stop, second.parseErrors, second.turns[0]!.toolError], ["parse_error", 1, "no move"])
    }))

  it("a number out of one move's reach takes the nearest it can", () => {
    assert.deepStrictEqual([taken(" 8", 9), taken(" 2", 9), taken(" 12", 9), taken(" 0", 2), taken("x", 9)], [1, 3, 1, 2, undefined])
    // text that is not a number is no move, and says what to write
    assert.deepStrictEqual(nim.game!.move({ stones: 8, next: "second" }, "second", " x"), { illegal: `" x" is not a move: answer with the stones to leave (5 to 7)` })
  })

  it.effect("evaluation plays the game's evalPlayers: only the policy's role is a sample", () =>
    Effect.gen(function* () {
      const played = yield* play(nim, { stones: 6, table: 0 }, (view) => ` ${stonesIn(view) - 2}`, "eval", 3)
      // the dealer (scripted) took 0 to 3 stones before the first move; it is no sample either
      assert.deepStrictEqual(played.roles, ["first", "first", "first"])
      const seen = played.episodes.flatMap((e) => e.turns.flatMap((t) => (t.observation !== undefined ? [t.observation] : [])))
      assert.isAbove(seen.length, 0)
      for (const o of seen) assert.match(o, /^second: \d+\n$/)
    }))

  it.effect("advantages are normalized per role within a group", () =>
    Effect.gen(function* () {
      const score = (value: number) => ({ value, masked: undefined, components: {} })
      const group = { roles: ["first", "first", "first", "first", "second", "second", "second", "second"], scores: [1, 1, 1, -1, -1, -1, -1, 1].map(score) }
      const out = yield* advantages(defaults("nim"), { step: 1, groups: [group as never], sampleSeconds: 0, staleGroups: 0 })
      const z = 1 / Math.sqrt(3)
      out.advantages[0]!.forEach((a, i) => assert.isBelow(Math.abs(a - [z, z, z, -3 * z, -z, -z, -z, 3 * z][i]!), 1e-9))
    }))
})

describe("frozen players", () => {
  it.effect("a frozen model's moves are sampled from it, seen by the policy, and never trained", () =>
    Effect.gen(function* () {
      const frozenGame = Game.env({ ...nimSpec, name: "nim-frozen", players: { second: Game.frozen("a-model") } })
      const frozen = scriptedSampler(() => " 0")
      const played = yield* play(frozenGame, { stones: 6, table: 0 }, (view) => ` ${stonesIn(view) - 1}`).pipe(
        Effect.provideService(FrozenPlayers, new Map([["a-model", { sampler: frozen.service, version: 0 }]])),
      )
      assert.deepStrictEqual(played.roles, ["first", "first"])
      // first leaves 5, the frozen second answers " 0" (takes the 3 it can), first leaves 1, second takes it
      assert.deepStrictEqual(played.episodes[0]!.turns.map((t) => [t.text, t.observation]), [[" 5", "second:  0\n"], [" 1", "second:  0\n"]])
      assert.deepStrictEqual(played.outcomes, [-1, -1])
      assert.strictEqual(frozen.calls.length, 4)
    }))

  it.effect("a frozen model the run did not start is named", () =>
    Effect.gen(function* () {
      const frozenGame = Game.env({ ...nimSpec, name: "nim-frozen", players: { second: Game.frozen("a-model") } })
      const e = yield* Effect.flip(play(frozenGame, { stones: 6, table: 0 }, (view) => ` ${stonesIn(view) - 1}`))
      assert.include(e.message, "role second is played by the frozen model a-model, which this run did not start")
    }))

  it.live("gyre run starts a game's frozen players: here the base model as the held-out opponent", () =>
    Effect.gen(function* () {
      const env = Game.env({ ...nimSpec, name: "nim-vs-base", evalPlayers: { second: Game.frozen("base") } })
      const run = yield* train({ env, steps: 1, groups: 2, groupSize: 2, evalEvery: 1, evalSize: 6, saveEvery: 0, out: Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-frozen-")) })
      const last = run.metrics.at(-1)!
      assert.isDefined(last["test/env/all/role/first/win_rate"])
      assert.isUndefined(last["test/env/all/role/second/win_rate"])
    }))
})

describe("a game env through the runner", () => {
  it.live("nim: rollouts carry role and outcome, held-out rows the policy's win rate against the scripted player", () =>
    Effect.gen(function* () {
      const run = yield* train({ env: "nim", steps: 2, groups: 2, groupSize: 4, evalEvery: 2, evalSize: 10, saveEvery: 0, out: Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-nim-")) })
      const rows = Fs.readFileSync(Path.join(run.outDir, "rollouts.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>)
      assert.deepStrictEqual([...new Set(rows.map((r) => r["role"]))].sort(), ["first", "second"])
      for (const r of rows) assert.include([-1, 0, 1], r["outcome"])
      const last = run.metrics.at(-1)!
      for (const key of ["test/env/all/role/first/win_rate", "env/all/role/first/outcome", "env/all/role/second/outcome"]) assert.isDefined(last[key], key)
      assert.isUndefined(last["test/env/all/role/second/win_rate"], "the scripted second is not a sample")
    }))
})
