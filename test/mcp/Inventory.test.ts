/**
 * The inventory MCP server (envs/mcp/inventory-server.ts) and its env: the tools over
 * stdio and HTTP, the env's episode on the real server, the episode's text within the
 * embedded model's 48-character context, and `run inventory` as a real process: the
 * server is its child while it runs, and no server is left after the run ends, after
 * Ctrl-C, or after the run is killed.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer } from "effect"
import { McpToolset, Server, type Shape } from "gyre/mcp"
import inventory, { answer, localServer } from "../../envs/inventory.ts"
import { ITEMS, priceOf, stockOf } from "../../envs/mcp/inventory-data.ts"
import { exited, killGroup, rows, start, waitUntil } from "../cli/Processes.ts"
import { alive, FIXTURE, gone, INVENTORY, ROOT, startHttp, stopHttp } from "./Fixture.ts"

const call = (ts: Shape, name: string, args: unknown) =>
  Effect.map(Effect.exit(ts.tools.find((t) => t.name === name)!.run(args)), (exit) =>
    Exit.isSuccess(exit) ? exit.value : `error: ${(Cause.squash(exit.cause) as Error).message}`)

/** Processes whose parent is `pid` and whose command line mentions `what` (from /proc). */
const childrenOf = (pid: number, what: string): Array<number> =>
  Fs.readdirSync("/proc").filter((d) => /^\d+$/.test(d)).flatMap((d) => {
    try {
      const ppid = Number(Fs.readFileSync(`/proc/${d}/stat`, "utf8").split(") ")[1]!.split(" ")[1])
      return ppid === pid && Fs.readFileSync(`/proc/${d}/cmdline`, "utf8").includes(what) ? [Number(d)] : []
    } catch {
      return []
    }
  })

const runArgs = (out: string, steps: number) => ["inventory", "--steps", String(steps), "--groups", "2", "--group-size", "2", "--eval-every", "0", "--save-every", "0", "--name", "r", "--out", out]

describe("the inventory MCP server", () => {
  it.live("serves stock and price over stdio, an unknown item as an error", () =>
    Effect.gen(function* () {
      const ts = yield* McpToolset.make(localServer)
      assert.deepStrictEqual(ts.listed.map((t) => t.name), ["stock", "price"])
      assert.strictEqual(ts.render("brackets"), "[stock item] [price item]")
      assert.include(ts.render("hermes"), '{"type": "function", "function": {"name": "stock", "description": "how many of an item are in stock", "parameters": {"type": "object"')
      assert.strictEqual(yield* call(ts, "price", { item: "lamp" }), String(priceOf("lamp")))
      assert.strictEqual(yield* call(ts, "stock", ts.tools[0]!.parseArgs("pen")), String(stockOf("pen")))
      assert.strictEqual(yield* call(ts, "stock", { item: "lampshade" }), "error: no lampshade")
    }).pipe(Effect.scoped))

  it.live("serves the same over streamable HTTP", () =>
    Effect.gen(function* () {
      const server = yield* Effect.promise(() => startHttp(INVENTORY))
      yield* Effect.addFinalizer(() => Effect.promise(() => stopHttp(server.child)))
      const ts = yield* McpToolset.make(Server.http(server.url))
      assert.strictEqual(yield* call(ts, "stock", { item: "kite" }), String(stockOf("kite")))
    }).pipe(Effect.scoped))

  it.live("the env's episode calls the server; a whole episode fits the 48-character context", () =>
    Effect.gen(function* () {
      const episode = inventory.episode!
      const step = (text: string) => episode.step({ state: { calls: 0 }, index: 0, text, ended: false, stopReason: "stop", toolCalls: "brackets" }, { item: "lamp", ask: "price" })
      const next = yield* step("[price lamp]").pipe(Effect.provide(inventory.services as Layer.Layer<McpToolset>))
      assert.strictEqual(next._tag === "Observe" ? next.observation : next._tag, `=${priceOf("lamp")};`)
      const longest = Math.max(...ITEMS.flatMap((item) => (["stock", "price"] as const).map((ask) => {
        const p = { item, ask }
        return `${inventory.prompt(p)}[${ask} ${item}]=${answer(p)}; ${answer(p)}`.length + 1 // + EOS
      })))
      assert.isAtMost(longest, 48)
    }))
})

describe("run inventory", () => {
  it("runs with the server as its child process, and leaves none when it ends", async () => {
    const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-mcp-"))
    const run = start(runArgs(out, 3))
    let servers: Array<number> = []
    await waitUntil(() => (servers = childrenOf(run.child.pid!, "inventory-server")).length > 0, run.child, 20)
    assert.strictEqual(servers.length, 1, `one server while the run runs:\n${run.output()}`)
    assert.strictEqual(await exited(run.child), 0, run.output())
    assert.strictEqual(rows(Path.join(out, "r", "metrics.jsonl")).filter((r) => Number(r["step"]) > 0).length, 3)
    assert.isTrue(await gone(servers[0]!), "no server left after the run")
  })

  it("leaves no server after Ctrl-C, nor after the run is killed", async () => {
    for (const how of ["SIGINT", "SIGKILL"] as const) {
      const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-mcp-"))
      const run = start(runArgs(out, 10_000))
      await waitUntil(() => rows(Path.join(out, "r", "metrics.jsonl")).some((r) => Number(r["step"]) >= 1), run.child)
      const servers = childrenOf(run.child.pid!, "inventory-server")
      assert.strictEqual(servers.length, 1, `one server while the run runs:\n${run.output()}`)
      if (how === "SIGINT") {
        process.kill(-run.child.pid!, "SIGINT")
        await exited(run.child)
      } else {
        await killGroup(run.child)
      }
      assert.isTrue(await gone(servers[0]!, 10_000), `no server left after ${how}`)
      assert.isFalse(alive(servers[0]!))
    }
  })

  it("stops before step 1 when its server cannot start, naming the command and its stderr", async () => {
    // an env module inside the repo (tmp/ is git-ignored), so "gyre" resolves as for envs/
    const dir = Path.join(ROOT, "tmp", `mcp-failing-${process.pid}`)
    Fs.mkdirSync(dir, { recursive: true })
    const envFile = Path.join(dir, "failing.ts")
    Fs.writeFileSync(envFile, `import { Schema } from "effect"
import { Env, Reward } from "gyre"
import { McpToolset, Server } from "gyre/mcp"

export default Env.make({
  name: "failing",
  problem: Schema.Struct({ n: Schema.Int }),
  source: Env.seeded(({ random }) => ({ n: random.int(0, 9) })),
  prompt: (p) => \`Say \${p.n}:\`,
  episode: McpToolset.episode(),
  reward: Reward.make("said", (r) => (r.completion.includes(String(r.problem.n)) ? 1 : 0)),
  services: McpToolset.layer(Server.stdio({ command: process.execPath, args: ["--import", "tsx", ${JSON.stringify(FIXTURE)}], env: { FIXTURE_START: "fail" }, cwd: ${JSON.stringify(ROOT)} })),
})
`)
    try {
      const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-mcp-"))
      const run = start([envFile, "--steps", "3", "--name", "r", "--out", out])
      const code = await exited(run.child)
      assert.notStrictEqual(code, 0)
      assert.include(run.output(), `cannot start the MCP server ${process.execPath} --import tsx ${FIXTURE}`)
      assert.include(run.output(), "exited with code 2; stderr: fixture: cannot open the database /nonexistent/db")
      assert.deepStrictEqual(rows(Path.join(out, "r", "metrics.jsonl")).filter((r) => Number(r["step"]) >= 1), [], "no step ran")
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})
