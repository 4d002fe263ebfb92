/**
 * Test envs for episode worker threads, written against the public API like a user's
 * module. `single` and `tools` have a weight-0 reward component `main_thread` (1 when it
 * scored on the main thread), so a test sees where their groups were played. `failing`
 * throws in its reward for one problem; `noisy` logs a warning from its reward;
 * `agent` is an agent env whose agent asks the run's endpoint twice over `fetch`;
 * `crashing` ends its worker thread in its episode's step (only ever run it on worker
 * threads: on the main thread it would end the process).
 */
import { isMainThread } from "node:worker_threads"
import { Effect, Schema } from "effect"
import { Agent, Env, Episode, Reward, Tool } from "gyre"

const Problem = Schema.Struct({ n: Schema.Int })
const source = Env.seeded(({ random }) => ({ n: random.int(0, 9) }))
const prompt = ({ n }: { readonly n: number }) => `Say ${n}:`
const vowel = Reward.make("vowel", (r) => (/^[aeiou]/.test(r.completion) ? 1 : 0))
const mainThread = Reward.make("main_thread", () => (isMainThread ? 1 : 0))
const reward = Reward.weighted({ vowel: [vowel, 1], main_thread: [mainThread, 0] })

/** A single-turn env. */
export const single = Env.make({ name: "threads-single", problem: Problem, source, prompt, reward, sampling: { maxTokens: 3, temperature: 1 }, eval: { heldOut: 0.2, size: 8 } })

const echo = Tool.make({ name: "echo", description: "says n back", args: Schema.Int, run: (n) => `${n}` })

/** A tool env: up to 3 turns of bracket calls. */
export const tools = Env.make({
  name: "threads-tools",
  problem: Problem,
  source,
  prompt,
  episode: Tool.episode({ tools: [echo], syntax: Tool.brackets, onParseError: "observe", limits: { maxTurns: 3, maxToolCalls: 2 } }),
  reward,
  sampling: { maxTokens: 4, temperature: 1 },
})

type Messages = ReadonlyArray<{ readonly role: string; readonly content: string }>

/** A chat completion request to the run's endpoint over plain `fetch` (`signal`: the episode's, else none). */
const request = (context: Agent.AgentContext<unknown>, messages: Messages, signal?: AbortSignal) =>
  fetch(`${context.baseURL}/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${context.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: context.model, messages }),
    ...(signal !== undefined ? { signal } : {}),
  })

/** One chat completion from the run's endpoint; a refusal throws, quoting it. */
const ask = async (context: Agent.AgentContext<unknown>, messages: Messages): Promise<string> => {
  const response = await request(context, messages, context.signal)
  const body = await response.json() as { choices?: Array<{ message: { content: string | null } }> }
  if (!response.ok) throw new Error(`the endpoint refused: ${JSON.stringify(body)}`)
  return body.choices?.[0]?.message.content ?? ""
}

/** An agent env: its agent asks, then asks again with its first reply and a follow-up. */
export const agent = Agent.env({
  name: "threads-agent",
  problem: Problem,
  source,
  prompt,
  reward,
  sampling: { maxTokens: 3, temperature: 1 },
  run: async (context) => {
    const first = [{ role: "user", content: prompt(context.problem) }]
    const reply = await ask(context, first)
    return ask(context, [...first, { role: "assistant", content: reply }, { role: "user", content: "Again:" }])
  },
  limits: { maxTurns: 2 },
})

/** The answers (HTTP statuses) to this thread's `lateAgent` requests that outlived their episodes. */
const lateAnswers: Array<Promise<string>> = []

/**
 * An agent env for a request that outlives its episode. On a thread with no earlier ones,
 * the agent asks once, then asks "hang" (which the test's sampler never answers), ignores
 * its signal and waits: its 5-second limit ends the episode while the request is open.
 * On a thread with earlier ones, it waits for their answers and returns their statuses,
 * which the reward scores 1 when every one was answered (503: the group had ended; 401:
 * it reached the endpoint after its episode's key was retired).
 */
export const lateAgent = Agent.env({
  name: "threads-late-agent",
  problem: Problem,
  source,
  prompt,
  reward: Reward.make("answered", (r) => (/^(503|401)(,(503|401))*$/.test(r.completion) ? 1 : 0)),
  sampling: { maxTokens: 3, temperature: 1 },
  run: async (context) => {
    // an earlier request never answered holds this episode until its limit: no completion, scored 0
    if (lateAnswers.length > 0) return (await Promise.all(lateAnswers)).join(",")
    await ask(context, [{ role: "user", content: prompt(context.problem) }])
    const status = request(context, [{ role: "user", content: "hang" }]).then((r) => String(r.status), () => "failed")
    lateAnswers.push(status)
    return status
  },
  limits: { maxTurns: 4, timeout: "5 seconds" },
})

/** Its reward throws on problem n = 3. */
export const failing = Env.make({
  name: "threads-failing",
  problem: Problem,
  source,
  prompt,
  reward: Reward.make("picky", (r: Reward.Rollout<{ readonly n: number }>) => {
    if (r.problem.n === 3) throw new Error("picky cannot score 3")
    return 1
  }),
  sampling: { maxTokens: 3, temperature: 1 },
})

/** Its reward logs a warning for every completion it scores. */
export const noisy = Env.make({
  name: "threads-noisy",
  problem: Problem,
  source,
  prompt,
  reward: Reward.make("noisy", () => Effect.as(Effect.logWarning(`noisy scored on the ${isMainThread ? "main thread" : "worker"}`), 1)),
  sampling: { maxTokens: 3, temperature: 1 },
})

/** Its episode's step ends the thread it runs on. */
export const crashing = Env.make({
  name: "threads-crashing",
  problem: Problem,
  source,
  prompt,
  episode: Episode.make({
    initial: () => 0,
    step: () => Effect.sync(() => process.exit(7)),
  }),
  reward: vowel,
  sampling: { maxTokens: 3, temperature: 1 },
})
