/**
 * MCP call latency: the inventory server's `stock` tool called through `McpToolset` over
 * stdio (a child process) and over streamable HTTP (loopback), next to the same lookup as
 * an in-process `Tool.make` tool, all through the tool's `run` (argument decoding done
 * before, as an episode does). One call at a time, 50 warm-up calls then 500 measured
 * per transport; then 16 calls in flight at once, 1,000 calls, as throughput.
 * Prints p50/p95 per call and each one's ratio to the in-process tool.
 *
 * Run: npx tsx bench/mcp.ts
 */
import { spawn } from "node:child_process"
import * as Path from "node:path"
import { Effect, Schema } from "effect"
import { Tool } from "gyre"
import { McpToolset, Server } from "gyre/mcp"
import { localServer } from "../envs/inventory.ts"
import { ITEMS, stockOf } from "../envs/mcp/inventory-data.ts"

const WARMUP = 50
const CALLS = 500
const PARALLEL_CALLS = 1000
const IN_FLIGHT = 16

const inProcess = Tool.make({
  name: "stock",
  args: Schema.Struct({ item: Schema.String }),
  run: ({ item }) => String(stockOf(item)),
})

const quantile = (sorted: ReadonlyArray<number>, q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!

const measure = Effect.fnUntraced(function* (tool: Tool.AnyTool) {
  const args = (i: number) => ({ item: ITEMS[i % ITEMS.length]! })
  for (let i = 0; i < WARMUP; i++) yield* tool.run(args(i))
  const times: Array<number> = []
  for (let i = 0; i < CALLS; i++) {
    const start = performance.now()
    const out = yield* tool.run(args(i))
    times.push(performance.now() - start)
    if (out !== String(stockOf(args(i).item))) return yield* Effect.die(new Error(`wrong answer ${out}`))
  }
  times.sort((a, b) => a - b)
  const start = performance.now()
  yield* Effect.forEach(Array.from({ length: PARALLEL_CALLS }, (_, i) => i), (i) => tool.run(args(i)), { concurrency: IN_FLIGHT })
  const perSecond = PARALLEL_CALLS / ((performance.now() - start) / 1000)
  return { p50: quantile(times, 0.5), p95: quantile(times, 0.95), perSecond }
})

/** The inventory server over HTTP, as a child process; its URL once it listens. */
const httpServer = Effect.acquireRelease(
  Effect.callback<{ readonly url: string; readonly kill: () => void }>((resume) => {
    const file = Path.join(import.meta.dirname, "../envs/mcp/inventory-server.ts")
    const child = spawn(process.execPath, ["--import", "tsx", file, "--http", "0"], { cwd: Path.join(import.meta.dirname, ".."), stdio: ["ignore", "pipe", "inherit"] })
    let out = ""
    child.stdout.on("data", (d) => {
      out += d
      const line = out.split("\n").find((l) => l.startsWith("http://"))
      if (line !== undefined) resume(Effect.succeed({ url: line.trim(), kill: () => child.kill("SIGKILL") }))
    })
  }),
  (s) => Effect.sync(s.kill),
)

const main = Effect.gen(function* () {
  const stdio = yield* McpToolset.make(localServer)
  const { url } = yield* httpServer
  const http = yield* McpToolset.make(Server.http(url))
  const rows: Array<readonly [string, { p50: number; p95: number; perSecond: number }]> = [
    ["in-process Tool.make", yield* measure(inProcess)],
    ["MCP over stdio", yield* measure(stdio.tools.find((t) => t.name === "stock")!)],
    ["MCP over streamable HTTP", yield* measure(http.tools.find((t) => t.name === "stock")!)],
  ]
  const base = rows[0]![1]
  const ms = (x: number) => (x < 1 ? `${(x * 1000).toFixed(0)} µs` : `${x.toFixed(2)} ms`)
  console.log(`one call at a time (${CALLS} calls after ${WARMUP} warm-up), and ${PARALLEL_CALLS} calls ${IN_FLIGHT} in flight:`)
  console.log(`${"".padEnd(26)}${"p50".padStart(10)}${"p95".padStart(10)}${"p50 x".padStart(10)}${"p95 x".padStart(10)}${"calls/s".padStart(12)}`)
  for (const [name, r] of rows) {
    console.log(`${name.padEnd(26)}${ms(r.p50).padStart(10)}${ms(r.p95).padStart(10)}${(r.p50 / base.p50).toFixed(0).padStart(10)}${(r.p95 / base.p95).toFixed(0).padStart(10)}${r.perSecond.toFixed(0).padStart(12)}`)
  }
})

Effect.runPromise(Effect.scoped(main)).then(() => process.exit(0), (e) => {
  console.error(e)
  process.exit(1)
})
