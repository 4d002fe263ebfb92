/**
 * A shop's stock and prices, which only an MCP server knows: "Price of lamp?".
 *
 * The tools come from a real MCP server, `envs/mcp/inventory-server.ts`, started as a
 * child process for the run (over stdio) and closed at its end; or, with
 * `INVENTORY_MCP_URL=http://127.0.0.1:8808/mcp`, one already serving streamable HTTP
 * (`npx tsx envs/mcp/inventory-server.ts --http 8808`). The answers cannot be guessed,
 * so the skill is tool use:
 *
 *   turn 1 (sampled)      "[price lamp]"   a call of the server's `price` tool (stops at "]")
 *   observation (env)     "=42;"           the server's result, never trained
 *   turn 2 (sampled)      " 42"            the answer, then end of sequence
 *
 * 40 items x {stock, price}: 80 problems, a quarter of them held out. It starts from
 * `models/base-256`, the base model pretrained on this format among others (it calls the
 * tool on about a third of problems); `models/base` never saw the format and scores 0.
 */
import * as Path from "node:path"
import { Config, Option, Schema } from "effect"
import { Env, Reward } from "gyre"
import { shippedModel } from "gyre/embedded"
import { McpToolset, Server } from "gyre/mcp"
import { ITEMS, priceOf, stockOf } from "./mcp/inventory-data.ts"

const Problem = Schema.Struct({ item: Schema.Literals(ITEMS), ask: Schema.Literals(["stock", "price"]) })
export type Problem = typeof Problem.Type

export const answer = ({ item, ask }: Problem): number => (ask === "stock" ? stockOf(item) : priceOf(item))

/** The server as a child process: compiled JavaScript from an install, TypeScript through tsx in a clone. */
const compiled = !import.meta.url.endsWith(".ts")
const serverFile = Path.join(import.meta.dirname, "mcp", `inventory-server.${compiled ? "js" : "ts"}`)
export const localServer = Server.stdio({
  command: process.execPath,
  args: compiled ? [serverFile] : ["--import", "tsx", serverFile],
  cwd: Path.resolve(import.meta.dirname, compiled ? "../.." : ".."),
})

/** INVENTORY_MCP_URL, when set: a server already serving streamable HTTP; else the child process. */
export const server = Config.option(Config.URL("INVENTORY_MCP_URL")).pipe(
  Config.map(Option.match({ onNone: (): Server.ServerSpec => localServer, onSome: (url) => Server.http(url.href) })),
)

/** 1 when the last turn is just the right number (a call left unanswered scores 0). */
export const correct = Reward.make<Problem>("correct", (r) => (/^ ?\d+$/.test(r.completion) && Number(r.completion) === answer(r.problem) ? 1 : 0))

export default Env.make({
  name: "inventory",
  problem: Problem,
  source: Env.seeded(({ random }) => ({ item: random.pick(ITEMS), ask: random.pick(["stock", "price"] as const) })),
  prompt: ({ item, ask }) => `${ask === "stock" ? "Stock" : "Price"} of ${item}?`,
  // brackets for the embedded model ("[price lamp]"), hermes with a chat template that has tools
  episode: McpToolset.episode({ onParseError: "end", limits: { maxTurns: 3, maxToolCalls: 2 } }),
  reward: Reward.weighted({ correct: [correct, 1] }),
  sampling: { maxTokens: 12, temperature: 1 },
  eval: { heldOut: 0.25, size: 80 },
  services: McpToolset.layerConfig(server, { timeout: "5 seconds" }),
  baseModel: shippedModel("base-256"),
  defaults: { steps: 40, evalEvery: 20, saveEvery: 20 },
})
