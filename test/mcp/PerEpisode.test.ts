/**
 * `McpToolset.perEpisode`'s resources and folders:
 * - `dir` is a `string` exactly when `tempDir: true`; without it a spec that reads `dir`
 *   does not typecheck, and one that gets past the types is told what to add;
 * - each folder's name holds the process id, and a run removes, at its start, the folders
 *   of processes that are gone (a run killed with SIGKILL leaves them behind).
 */
import { spawnSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { assert, describe, expectTypeOf, it } from "@effect/vitest"
import { Effect } from "effect"
import { Episode, Tool } from "gyre"
import { McpToolset, Server } from "gyre/mcp"
import * as EpisodeFolders from "../../src/mcp/EpisodeFolders.ts"
import * as PlatformFileSystem from "../../src/platform/FileSystem.ts"
import { ROOT } from "./Fixture.ts"

const GRAPH = Path.join(ROOT, "test/mcp/fixtures/graph-server.mjs")
const graphServer = (file: string) => Server.stdio({ command: process.execPath, args: [GRAPH], env: { GRAPH_FILE: file }, cwd: ROOT })

type AnyEpisode = Episode.Episode<unknown, any, never>

/** A folder of `root` named as a process `pid` names its episodes' folders, with a file in it. */
const folderOf = (root: string, pid: number, suffix = "AbC123") => {
  const dir = Path.join(root, `${EpisodeFolders.PREFIX}${pid}-${suffix}`)
  Fs.mkdirSync(dir)
  Fs.writeFileSync(Path.join(dir, "memory.json"), "[]")
  return dir
}

/** The id of a process that made a folder in `root` as an episode would, then was killed with SIGKILL. */
const killedWithFolder = (root: string): number => {
  const script = `const p = require("node:path"); require("node:fs").mkdirSync(p.join(${JSON.stringify(root)}, "gyre-episode-" + process.pid + "-Xy12Zq")); process.kill(process.pid, "SIGKILL")`
  const child = spawnSync(process.execPath, ["-e", script])
  assert.strictEqual(child.signal, "SIGKILL")
  return child.pid
}

describe("perEpisode's dir", () => {
  it("is a string with tempDir: true, and absent without it", () => {
    McpToolset.perEpisode(({ dir }) => {
      expectTypeOf(dir).toEqualTypeOf<string>()
      return graphServer(Path.join(dir, "graph.json"))
    }, { tempDir: true })
    // @ts-expect-error: without tempDir: true there is no folder to read
    McpToolset.perEpisode(({ dir }) => graphServer(`${dir}/graph.json`))
    McpToolset.perEpisode(({ problem }) => graphServer(`/tmp/${String(problem)}.json`), { syntax: Tool.hermes })
  })

  it.live("read anyway (code past the types) stops the episode saying to add tempDir: true", () =>
    Effect.scoped(
      Effect.gen(function* () {
        // as JavaScript would: a property read the types do not know
        const episode = McpToolset.perEpisode((resources) => graphServer(`${String(Reflect.get(resources, "dir"))}/graph.json`), { syntax: Tool.hermes }) as AnyEpisode
        const error = yield* Effect.flip(Episode.start(episode, {}))
        assert.include(error.message, "a folder made only with { tempDir: true }: add tempDir: true to its options")
        assert.notStrictEqual(error.infra, true)
      }),
    ))
})

describe("per-episode folders", () => {
  it.effect("of processes that are gone are removed; those of live processes and other folders are kept", () =>
    Effect.gen(function* () {
      const root = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-sweep-"))
      const dead = killedWithFolder(root)
      const mine = folderOf(root, process.pid)
      const parent = folderOf(root, process.ppid)
      const older = Path.join(root, "gyre-episode-AbC123")
      Fs.mkdirSync(older)
      const removed = yield* EpisodeFolders.sweep(root)
      assert.deepStrictEqual(removed, [`gyre-episode-${dead}-Xy12Zq`])
      assert.deepStrictEqual(Fs.readdirSync(root).sort(), [Path.basename(older), Path.basename(mine), Path.basename(parent)].sort())
    }).pipe(Effect.provide(PlatformFileSystem.layer)))

  it.live("are named for the process, and the first one of a perEpisode removes the stale ones first", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const dead = killedWithFolder(Os.tmpdir())
        const stale = Path.join(Os.tmpdir(), `gyre-episode-${dead}-Xy12Zq`)
        assert.isTrue(Fs.existsSync(stale))
        const dirs: Array<string> = []
        const episode = McpToolset.perEpisode(({ dir }) => {
          dirs.push(dir)
          return graphServer(Path.join(dir, "graph.json"))
        }, { tempDir: true, syntax: Tool.hermes }) as AnyEpisode
        yield* Effect.scoped(Episode.start(episode, {}))
        assert.isFalse(Fs.existsSync(stale), "the folder of a process that is gone is removed")
        assert.match(Path.basename(dirs[0]!), new RegExp(`^gyre-episode-${process.pid}-`))
        assert.isFalse(Fs.existsSync(dirs[0]!), "the episode's own folder is removed when it ends")
      }),
    ), 60_000)
})
