/**
 * The envs of `bench/cores.ts`, in a module of their own so that episode workers can load
 * them: the client bench's single-turn, tool and agent envs, and `heavy`, the single-turn env with
 * a reward that spends about a millisecond of CPU per completion (hashing it over and over),
 * as a checker that parses and verifies an answer does.
 */
import { Env, Reward } from "gyre"
import { envs as workloads } from "../test/backends/http/ClientWorkloads.ts"

/** Hashes of the completion per score: about 1 ms of CPU on this machine's cores. */
const ROUNDS = 400

const checked = Reward.make("checked", (r) => {
  let h = 0
  for (let k = 0; k < ROUNDS; k++) h ^= Env.hash32(`${k}/${r.completion}`)
  return /The answer is (-?\d+)\./.exec(r.completion) !== null && (h & 1) >= 0 ? 1 : 0
})

export const envs = {
  single: workloads.single,
  tools: workloads.tools,
  agent: workloads.agent,
  heavy: Env.make({ ...workloads.single, name: "bench-heavy", reward: checked }),
}
