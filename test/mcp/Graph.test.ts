/**
 * A server that keeps its state outside its process (test/mcp/fixtures/graph-server.mjs,
 * a stand-in for server-memory: a graph in a file) and whose tools take arrays and objects.
 *
 * - `McpToolset.perEpisode` with a process per episode but one file: later episodes see
 *   the entities of earlier ones; with a server spec of the episode and `tempDir: true`,
 *   each episode has its own file, in a folder removed when it ends: no foreign entity.
 * - Every tool is called right from an episode in the hermes (JSON) syntax; the bracket
 *   syntax, which cannot carry arrays, is refused by the episode's check (what a run does at
 *   its start: StartCheck.test.ts), and at the first turn of an episode played outside a
 *   run, naming the tools.
 */
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { Episode, Tool } from "gyre"
import { McpToolset, Server } from "gyre/mcp"
import { ROOT } from "./Fixture.ts"

const GRAPH = Path.join(ROOT, "test/mcp/fixtures/graph-server.mjs")
const graphServer = (file: string) => Server.stdio({ command: process.execPath, args: [GRAPH], env: { GRAPH_FILE: file }, cwd: ROOT })

type AnyEpisode = Episode.Episode<unknown, any, never>

const hermesCall = (name: string, args: unknown) => `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`

/** The tool response in a hermes observation. */
const response = (next: Episode.Next<unknown>) => {
  if (next._tag !== "Observe") throw new Error(`expected an observation, got ${JSON.stringify(next)}`)
  return /<tool_response>\n([\s\S]*)\n<\/tool_response>/.exec(next.observation)?.[1] ?? next.observation
}

/** One episode: the policy creates an entity of its own, then reads the graph; the names of the entities it did not create. */
const foreignIn = (episode: AnyEpisode, i: number) =>
  Effect.scoped(
    Effect.gen(function* () {
      const problem = { i }
      const turn = (state: unknown, index: number, text: string) => episode.step({ state, index, text, ended: false, stopReason: "stop", toolCalls: "hermes" }, problem)
      const state = yield* Episode.start(episode, problem)
      const created = yield* turn(state, 0, hermesCall("create_entities", { entities: [{ name: `episode-${i}`, entityType: "episode", observations: [`problem ${i}`] }] }))
      assert.strictEqual(response(created), JSON.stringify([`episode-${i}`]))
      const read = yield* turn(created.state, 1, hermesCall("read_graph", {}))
      const graph = JSON.parse(response(read)) as Array<{ name: string }>
      return graph.map((e) => e.name).filter((name) => name !== `episode-${i}`)
    }),
  )

describe("per-episode server state", () => {
  it.live("one file for every episode leaks earlier episodes' entities; a folder per episode leaks none, and is removed", () =>
    Effect.gen(function* () {
      const shared = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-graph-")), "graph.json")
      const leaky = McpToolset.perEpisode(graphServer(shared), { syntax: Tool.hermes }) as AnyEpisode
      const leaked = yield* Effect.forEach([0, 1, 2, 3], (i) => foreignIn(leaky, i))
      assert.deepStrictEqual(leaked.map((f) => f.length), [0, 1, 2, 3])

      const dirs: Array<string> = []
      const isolated = McpToolset.perEpisode(({ dir }) => {
        dirs.push(dir!)
        return graphServer(Path.join(dir!, "graph.json"))
      }, { syntax: Tool.hermes, tempDir: true }) as AnyEpisode
      const foreign = yield* Effect.forEach(Array.from({ length: 32 }, (_, i) => i), (i) => foreignIn(isolated, i), { concurrency: 8 })
      assert.deepStrictEqual(foreign.map((f) => f.length), Array.from({ length: 32 }, () => 0))
      assert.strictEqual(new Set(dirs).size, 32)
      for (const dir of dirs) assert.isFalse(Fs.existsSync(dir), `${dir} is removed when its episode ends`)
    }))
})

describe("tools that take arrays and objects", () => {
  it.live("are each called right in the hermes syntax", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const file = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-graph-")), "graph.json")
        const episode = McpToolset.perEpisode(graphServer(file), { syntax: Tool.hermes, limits: { maxToolCalls: 8 } }) as AnyEpisode
        let state = yield* Episode.start(episode, {})
        const calls: Array<[string, unknown, string]> = [
          ["create_entities", { entities: [{ name: "ada", entityType: "person", observations: ["wrote notes"] }, { name: "bob", entityType: "person", observations: [] }] }, '["ada","bob"]'],
          ["add_observations", { observations: [{ entityName: "bob", contents: ["likes graphs"] }] }, "ok"],
          ["search_nodes", { query: "graphs" }, '["bob"]'],
          ["delete_entities", { entityNames: ["ada"] }, "ok"],
          ["read_graph", {}, '[{"name":"bob","entityType":"person","observations":["likes graphs"]}]'],
        ]
        for (const [index, [name, args, expected]] of calls.entries()) {
          const next = yield* episode.step({ state, index, text: hermesCall(name, args), ended: false, stopReason: "stop", toolCalls: "hermes" }, {})
          assert.strictEqual(response(next), expected, name)
          state = next.state
        }
      }),
    ))

  it.live("are refused in the bracket syntax by the check and at the first turn, naming them and what to use instead", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const file = Path.join(Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-graph-")), "graph.json")
        const episode = McpToolset.perEpisode(graphServer(file), { syntax: Tool.brackets }) as AnyEpisode
        const checked = yield* Effect.flip(Effect.scoped(episode.check!({ format: "hermes", problem: {} })))
        assert.include(checked.message, 'McpToolset.perEpisode(server, { include: ["read_graph", "search_nodes"] })')
        const state = yield* Episode.start(episode, {})
        const error = yield* Effect.flip(episode.step({ state, index: 0, text: "[read_graph]", ended: false, stopReason: "stop", toolCalls: "brackets" }, {}))
        assert.include(error.message, "create_entities (entities), add_observations (observations), delete_entities (entityNames)")
        assert.include(error.message, "syntax: Tool.hermes")
        assert.include(error.message, 'include: ["read_graph", "search_nodes"]')
        assert.notStrictEqual(error.infra, true)
      }),
    ))
})
