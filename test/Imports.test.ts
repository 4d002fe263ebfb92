/**
 * The shape of the import graph of `src/`: commands depend on the library, never the
 * reverse; the application (`src/app`: training, evaluation, the report, rescoring,
 * export, run options) is imported only by the commands and the entry points; the public
 * modules reach no runner or command internals; and no module imports itself through others,
 * nor any folder. Imports are read from the source text (static
 * `import`/`export ... from`, including type-only ones, and `import("...")` with a
 * literal path); only relative paths to files in `src/` count.
 */
import { assert, describe, it } from "@effect/vitest"
import * as Fs from "node:fs"
import * as Path from "node:path"

const SRC = Path.resolve(import.meta.dirname, "../src")

const filesUnder = (dir: string): Array<string> =>
  Fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const full = Path.join(dir, e.name)
    if (e.isDirectory()) return filesUnder(full)
    return /\.(ts|mts|cts)$/.test(e.name) && !e.name.endsWith(".d.ts") ? [full] : []
  })

// a statement that starts a line (not a JSDoc line, which starts with `*`), up to its path
const STATIC = /(?:^|\n)[ \t]*(?:import|export)\b[^"'`;]*?\bfrom[ \t]*["']([^"']+)["']|(?:^|\n)[ \t]*import[ \t]*["']([^"']+)["']/g
const DYNAMIC = /\bimport\(\s*["']([^"']+)["']\s*\)/g

/** The files of `src/` that `file` imports. */
const importsOf = (file: string): Array<string> => {
  const text = Fs.readFileSync(file, "utf8")
  const specs = [...text.matchAll(STATIC)].map((m) => m[1] ?? m[2] ?? "").concat([...text.matchAll(DYNAMIC)].map((m) => m[1] ?? ""))
  const out = new Set<string>()
  for (const spec of specs) {
    if (!spec.startsWith(".")) continue
    const base = Path.resolve(Path.dirname(file), spec)
    const found = [base, base.replace(/\.js$/, ".ts"), `${base}.ts`, Path.join(base, "index.ts")].find((f) => f.startsWith(SRC) && Fs.existsSync(f) && Fs.statSync(f).isFile())
    if (found) out.add(found)
  }
  return [...out]
}

const graph = new Map(filesUnder(SRC).map((f) => [f, importsOf(f)] as const))
const rel = (f: string) => Path.relative(SRC, f).split(Path.sep).join("/")
const under = (folder: string) => (f: string) => rel(f).startsWith(`${folder}/`)
/** The folder a module is in: its first folder under src/; a backend's own (backends/http/client, backends/local). */
const folderOf = (f: string): string => {
  const parts = rel(f).split("/")
  if (parts.length === 1) return parts[0]!
  if (parts[0] === "backends") return parts.slice(0, parts.length > 3 ? 3 : 2).join("/")
  return parts[0]!
}

/** Every circle of `graph`, as the nodes of each strongly connected part of more than one node (or one importing itself). */
const circles = (graph: ReadonlyMap<string, ReadonlyArray<string>>, name: (v: string) => string = rel): Array<Array<string>> => {
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: Array<string> = []
  const onStack = new Set<string>()
  const out: Array<Array<string>> = []
  const visit = (v: string) => {
    index.set(v, counter)
    low.set(v, counter++)
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!))
    }
    if (low.get(v) === index.get(v)) {
      const part: Array<string> = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        part.push(w)
      } while (w !== v)
      if (part.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(part.map(name).sort())
    }
  }
  for (const v of graph.keys()) if (!index.has(v)) visit(v)
  return out
}

describe("the import graph of src/", () => {
  it("keeps the top of src/ to the entry (index.ts), the run loop's front (Runner.ts) and Paths.ts: everything else is in a folder", () => {
    assert.deepStrictEqual(Fs.readdirSync(SRC).filter((f) => f.endsWith(".ts")).sort(), ["Paths.ts", "Runner.ts", "index.ts"])
  })

  it("reads the modules it checks", () => {
    assert.isAbove(graph.size, 50)
    assert.include(graph.get(Path.join(SRC, "cli/main.ts")) ?? [], Path.join(SRC, "cli/run.ts"))
  })

  it("no module outside src/cli imports from src/cli (commands use the library, never the reverse)", () => {
    const back = [...graph].flatMap(([f, deps]) => (under("cli")(f) ? [] : deps.filter(under("cli")).map((d) => `${rel(f)} -> ${rel(d)}`)))
    assert.deepStrictEqual(back, [])
  })

  it("the public modules import nothing from src/run or src/cli", () => {
    const publicModules = [...graph.keys()].filter((f) => rel(f) === "index.ts" || under("entry")(f) || under("testing")(f))
    const reexported = graph.get(Path.join(SRC, "index.ts")) ?? []
    const bad = [...new Set([...publicModules, ...reexported])].flatMap((f) =>
      (graph.get(f) ?? []).filter((d) => under("run")(d) || under("cli")(d)).map((d) => `${rel(f)} -> ${rel(d)}`)
    )
    assert.deepStrictEqual(bad, [])
  })

  it("nothing below the application imports it: src/app is imported only by src/cli, src/entry and itself", () => {
    const up = [...graph].flatMap(([f, deps]) =>
      under("app")(f) || under("cli")(f) || under("entry")(f) ? [] : deps.filter(under("app")).map((d) => `${rel(f)} -> ${rel(d)}`)
    )
    assert.deepStrictEqual(up, [])
  })

  it("the library's layers import nothing of the run loop, the application or the commands", () => {
    const lower = ["contract", "vocabulary", "folder", "loss", "metrics", "services", "util", "env", "reward", "tool", "game", "agent"]
    const up = [...graph].flatMap(([f, deps]) =>
      lower.some((l) => under(l)(f)) ? deps.filter((d) => under("run")(d) || under("app")(d) || under("cli")(d)).map((d) => `${rel(f)} -> ${rel(d)}`) : []
    )
    assert.deepStrictEqual(up, [])
  })

  it("has no import circle", () => {
    assert.deepStrictEqual(circles(graph), [])
  })

  it("has no circle between folders either: each folder's imports reach only folders below it", () => {
    const folders = new Map<string, Set<string>>()
    for (const [f, deps] of graph) {
      const from = folderOf(f)
      const to = folders.get(from) ?? new Set<string>()
      for (const d of deps) if (folderOf(d) !== from) to.add(folderOf(d))
      folders.set(from, to)
    }
    assert.isAbove(folders.size, 20)
    assert.deepStrictEqual(circles(new Map([...folders].map(([k, v]) => [k, [...v]])), (v) => v), [])
  })
})
