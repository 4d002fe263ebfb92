/**
 * Nim, learned by self-play: a pile of stones, two players take 1, 2 or 3 in turn, and
 * whoever takes the last stone wins. Both sides are the policy in training (each side's
 * moves trained with its own outcome, +1 or -1); held-out evaluation pits the policy,
 * moving first, against a scripted player that takes a random legal number, so
 * `test/env/all/role/first/win_rate` is the win rate against a fixed opponent.
 *
 * A scripted dealer takes 0 to 3 stones before the first move, at random per game: the
 * games of a group then start from different piles. Without it self-play collapses to one
 * deterministic game per group, whose samples all get one outcome and no advantage.
 *
 * Each move is one prompt, the mover's view, answered with the stones it leaves:
 * "Nim: 9 stones, take 1 to 3. Left:" -> " 8" (it took 1). A number out of one move's
 * reach takes the nearest it can (" 2" from 9 takes 3); an answer that is not a number
 * ends the game: -1 for its maker, 0 for the other side. The winning rule, leave a
 * multiple of 4, is there to be found.
 */
import { Schema } from "effect"
import { Env, Game } from "gyre"

const Problem = Schema.Struct({ stones: Schema.Int, table: Schema.Int })
type Problem = typeof Problem.Type

type Role = "first" | "second"
interface State {
  readonly stones: number
  /** the dealer moves first: it takes 0 to 3 stones at random, so a group's games start from different piles */
  readonly next: Role | "dealer"
  /** who took the last stone, once the pile is empty */
  readonly winner?: Role
}

const other = (r: Role): Role => (r === "first" ? "second" : "first")

/**
 * The number of stones a move's text takes: the text says how many to leave, and a number
 * outside the reach of one move (1 to 3 stones) takes the nearest it can. Text that is not
 * a number is no move.
 */
export const taken = (text: string, stones: number): number | undefined => {
  const m = /^\s*(\d+)\s*$/.exec(text)
  return m === null ? undefined : Math.min(Math.min(3, stones), Math.max(1, stones - Number(m[1])))
}

export default Game.env({
  name: "nim",
  problem: Problem,
  // the table number only widens the problem space, so that held-out tables exist for every pile
  source: Env.seeded(({ random }) => ({ stones: random.int(6, 12), table: random.int(0, 999) })),
  roles: ["first", "second", "dealer"],
  start: (p: Problem): State => ({ stones: p.stones, next: "dealer" }),
  toMove: (s: State) => s.next,
  view: (s: State) => `Nim: ${s.stones} stones, take 1 to 3. Left:`,
  move: (s: State, role, text) => {
    if (role === "dealer") return { state: { stones: s.stones - Number(text), next: "first" as const } }
    const n = taken(text, s.stones)
    if (n === undefined) return { illegal: `${JSON.stringify(text)} is not a move: answer with the stones to leave (${Math.max(0, s.stones - 3)} to ${s.stones - 1})` }
    const stones = s.stones - n
    return { state: stones === 0 ? { stones, next: other(role as Role), winner: role as Role } : { stones, next: other(role as Role) } }
  },
  outcome: (s: State) => (s.winner === undefined ? undefined : { [s.winner]: 1, [other(s.winner)]: -1, dealer: 0 }),
  // an illegal move costs its maker, and wins the other side nothing it played for
  illegal: (_: State, role) => ({ [role]: -1, [other(role as Role)]: 0, dealer: 0 }),
  maxMoves: 16,
  players: { dealer: Game.scripted<State>((_, __, random) => String(random.int(0, 3))) },
  evalPlayers: { second: Game.scripted<State>((s, _, random) => String(s.stones - random.int(1, Math.min(3, s.stones)))) },
  sampling: { maxTokens: 3, temperature: 1 },
  eval: { heldOut: 0.1, size: 200 },
  // held-out win rate 0.365 -> 0.61 -> 0.76 at steps 0, 100, 200 (10 min 21 s on 2 cores)
  defaults: { steps: 200, groupSize: 16, evalEvery: 100, saveEvery: 100 },
})
