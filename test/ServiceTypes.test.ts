/**
 * Type tests: services flow through every combinator (weighted sums, gates, leaves whose
 * scorer may return Effects needing different services, group rewards, tools, tool
 * episodes, episodes, per-episode services) as the union of what the parts need, with no
 * explicit type arguments; and an env whose `services` miss one is a type error that names
 * it. Checked by `tsc --noEmit` (`npm test` runs it first): `expectTypeOf` and
 * `@ts-expect-error` lines; the `it`s only make vitest count the file.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Layer, Schema, type Scope } from "effect"
import { expectTypeOf } from "vitest"
import * as Env from "../src/vocabulary/Env.ts"
import * as Episode from "../src/env/Episode.ts"
import * as Reward from "../src/vocabulary/Reward.ts"
import * as Tool from "../src/vocabulary/Tool.ts"
import { numericAnswer } from "../rewards/answers.ts"
import { maxLength } from "../rewards/length.ts"
import guess, { AnswerKey, check, type Game, Judge, judged, solved } from "./envs/guess.ts"

class Sandbox extends Context.Service<Sandbox, { readonly run: (code: string) => Effect.Effect<string> }>()("test/Sandbox") {}

const usesKey = Reward.make("correct", (r: Reward.Rollout<Game>) => AnswerKey.use((k) => k.secret(r.problem.id)))
const usesJudge = Reward.make("judged", (r: Reward.Rollout<Game>) => Judge.use((j) => Effect.map(j.ask(r.completion), Number)))
const plain = Reward.make("plain", (r: Reward.Rollout<Game>) => r.problem.id)

describe("services through the reward combinators", () => {
  it("weighted, all, any, threshold, clamp, nested: the union of what the members need", () => {
    expectTypeOf(usesKey).toEqualTypeOf<Reward.Reward<Game, AnswerKey>>()
    const total = Reward.weighted({ correct: [usesKey, 1], judged: [usesJudge, 0] })
    expectTypeOf(total).toEqualTypeOf<Reward.Reward<Game, AnswerKey | Judge>>()
    // @ts-expect-error: the sum needs Judge too
    const _tooFew: Reward.Reward<Game, AnswerKey> = total
    expectTypeOf(Reward.weighted({ plain: [plain, 1] })).toEqualTypeOf<Reward.Reward<Game, never>>()
    expectTypeOf(Reward.all("both", [usesKey, usesJudge])).toEqualTypeOf<Reward.Reward<Game, AnswerKey | Judge>>()
    expectTypeOf(Reward.any("either", [plain, usesJudge])).toEqualTypeOf<Reward.Reward<Game, Judge>>()
    expectTypeOf(Reward.threshold(Reward.clamp(usesKey, 0, 1), 0.5)).toEqualTypeOf<Reward.Reward<Game, AnswerKey>>()
    const nested = Reward.weighted({ inner: [Reward.weighted({ k: [usesKey, 1], p: [plain, 1] }), 1], gate: [Reward.all("g", [usesJudge]), 0] })
    expectTypeOf(nested).toEqualTypeOf<Reward.Reward<Game, AnswerKey | Judge>>()
    // generic library rewards take the problem from the others, or from the env
    expectTypeOf(Reward.weighted({ id: [numericAnswer((p: Game) => p.id), 1], brief: [maxLength(4), 0], k: [usesKey, 0] }))
      .toEqualTypeOf<Reward.Reward<Game, AnswerKey>>()
    // @ts-expect-error: a reward over another problem type does not mix in
    Reward.weighted({ k: [usesKey, 1], other: [Reward.make("o", (r: Reward.Rollout<{ readonly s: string }>) => r.problem.s.length), 1] })
    assert.isTrue(Reward.isReward(total))
  })

  it("leaves and group rewards: a scorer whose branches need different services needs both", () => {
    const either = Reward.make("either", (r: Reward.Rollout<Game>) => (r.index > 0 ? AnswerKey.use((k) => k.secret(1)) : Judge.use((j) => Effect.map(j.ask(""), Number))))
    expectTypeOf(either).toEqualTypeOf<Reward.Reward<Game, AnswerKey | Judge>>()
    const group = Reward.group("g", (rs: ReadonlyArray<Reward.Rollout<Game>>) =>
      rs.length > 1 ? Effect.forEach(rs, () => AnswerKey.use((k) => k.secret(1))) : Effect.forEach(rs, () => Judge.use((j) => Effect.map(j.ask(""), Number))))
    expectTypeOf(group).toEqualTypeOf<Reward.Reward<Game, AnswerKey | Judge>>()
    expectTypeOf(Reward.weighted({ g: [group, 1], p: [plain, 0] })).toEqualTypeOf<Reward.Reward<Game, AnswerKey | Judge>>()
    // explicit type arguments still work, and still check the scorer
    expectTypeOf(Reward.make<Game, AnswerKey>("k", (r) => AnswerKey.use((k) => k.secret(r.problem.id)))).toEqualTypeOf<Reward.Reward<Game, AnswerKey>>()
    // @ts-expect-error: the scorer needs Judge, which the type arguments leave out
    Reward.make<Game, AnswerKey>("k", () => Judge.use(() => Effect.succeed(1)))
    // @ts-expect-error: a scorer returns a number, a Promise of one or an Effect
    Reward.make("s", () => "1")
    expectTypeOf(Reward.make("n", () => 1)).toEqualTypeOf<Reward.Reward<unknown, never>>()
    // an untyped result (a field of JSON.parse's) needs nothing
    expectTypeOf(Reward.make("json", (r) => JSON.parse(r.completion).score)).toEqualTypeOf<Reward.Reward<unknown, never>>()
  })

  it("the guess env's rewards", () => {
    expectTypeOf(solved).toEqualTypeOf<Reward.Reward<Game, AnswerKey>>()
    expectTypeOf(judged).toEqualTypeOf<Reward.Reward<Game, Judge>>()
    expectTypeOf(Reward.weighted({ solved: [solved, 1], judged: [judged, 0] })).toEqualTypeOf<Reward.Reward<Game, AnswerKey | Judge>>()
    expectTypeOf(guess).toEqualTypeOf<Env.Env<Game>>()
  })
})

describe("services through tools and episodes", () => {
  it("a tool needs what its state and its handler need; its context is typed", () => {
    expectTypeOf(check).toEqualTypeOf<Tool.Tool<number, AnswerKey, Game>>()
    const both = Tool.make({
      name: "both",
      args: Schema.String,
      state: (game: Game) => Effect.acquireRelease(AnswerKey.use((k) => k.secret(game.id)), () => Effect.void),
      run: (code, { state, problem, turns }) => {
        expectTypeOf(state).toEqualTypeOf<number>()
        expectTypeOf(problem).toEqualTypeOf<Game>()
        expectTypeOf(turns).toEqualTypeOf<ReadonlyArray<Tool.TurnSoFar>>()
        return Sandbox.use((s) => s.run(code))
      },
    })
    // the state's Scope is the episode's: not a requirement
    expectTypeOf(both).toEqualTypeOf<Tool.Tool<string, Sandbox | AnswerKey, Game>>()
    const plainTool = Tool.make({ name: "plain", args: Schema.Int, run: (n) => n + 1 })
    expectTypeOf(plainTool).toEqualTypeOf<Tool.Tool<number, never, unknown>>()
    // Tool.episode: the union of the tools' services, the problems every tool accepts
    const episode = Tool.episode({ tools: [check, both, plainTool] })
    expectTypeOf(episode).toEqualTypeOf<Episode.Episode<Game, Tool.ToolState, AnswerKey | Sandbox>>()
    expectTypeOf(Tool.episode({ tools: [plainTool] })).toEqualTypeOf<Episode.Episode<unknown, Tool.ToolState, never>>()
  })

  it("Episode.make needs what its step and its open need; Episode.provide takes away what it provides", () => {
    const episode = Episode.make({
      open: (game: Game) => Effect.acquireRelease(AnswerKey.use((k) => k.secret(game.id)), () => Effect.void),
      step: (turn) => Judge.use(() => Effect.succeed(Episode.end(turn.state))),
    })
    expectTypeOf(episode).toEqualTypeOf<Episode.Episode<Game, number, Judge | AnswerKey>>()
    // a step whose branches need different services needs both
    const branches = Episode.make({
      initial: () => 0,
      step: (turn) =>
        turn.index > 0 ? Judge.use(() => Effect.succeed(Episode.end(turn.state))) : Sandbox.use(() => Effect.succeed(Episode.observe(turn.state + 1, "?"))),
    })
    expectTypeOf(branches).toEqualTypeOf<Episode.Episode<unknown, number, Judge | Sandbox>>()
    const judgeFromSandbox = Layer.effect(Judge, Sandbox.use((s) => Effect.succeed(Judge.of({ ask: (q) => s.run(q) }))))
    const provided = Episode.provide(episode, judgeFromSandbox)
    expectTypeOf(provided).toEqualTypeOf<Episode.Episode<Game, Episode.Provided<number, Judge>, AnswerKey | Sandbox>>()
    expectTypeOf<Exclude<AnswerKey | Scope.Scope, Scope.Scope>>().toEqualTypeOf<AnswerKey>()
  })
})

describe("a missing service at Env.make names the service", () => {
  const base = {
    name: "g",
    problem: Schema.Struct({ id: Schema.Int }),
    source: Env.seeded(({ random }) => ({ id: random.int(0, 9) })),
    prompt: () => "Guess 1-9:",
  }
  const reward = Reward.weighted({ solved: [solved, 1], judged: [judged, 0] })
  const episode = Tool.episode({ tools: [check] })

  it("every service provided: an Env of the problem, needing nothing from outside", () => {
    const env = Env.make({ ...base, reward, episode, services: Layer.mergeAll(AnswerKey.layer, Judge.layer) })
    expectTypeOf(env).toEqualTypeOf<Env.Env<{ readonly id: number }>>()
    // a layer that provides more is fine, and it may use the run's own sampler
    Env.make({ ...base, reward: solved, services: Layer.mergeAll(AnswerKey.layer, Judge.layer) })
  })

  it("one missing, or no services at all: a type error whose type names what is missing", () => {
    // @ts-expect-error: services must also provide Judge (ServicesNotProvided<Judge>)
    Env.make({ ...base, reward, episode, services: AnswerKey.layer })
    // @ts-expect-error: the episode's tool needs AnswerKey (ServicesNotProvided<AnswerKey>)
    Env.make({ ...base, reward: judged, episode, services: Judge.layer })
    // @ts-expect-error: no services, both needed (ServicesNotProvided<AnswerKey | Judge>)
    Env.make({ ...base, reward, episode })
    // the error's type is exactly the missing services
    expectTypeOf<Env.CheckServices<AnswerKey | Judge, AnswerKey>>().toEqualTypeOf<{ readonly services: Env.ServicesNotProvided<Judge> }>()
    expectTypeOf<Env.CheckServices<AnswerKey | Judge, never>>().toEqualTypeOf<{ readonly services: Env.ServicesNotProvided<AnswerKey | Judge> }>()
    expectTypeOf<Env.CheckServices<AnswerKey, AnswerKey | Judge>>().toEqualTypeOf<unknown>()
  })
})
