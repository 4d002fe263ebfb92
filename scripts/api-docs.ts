/**
 * The API reference in docs/api, generated from the doc comments of gyre's public modules:
 * one page per namespace of `gyre` (and per other entry point), each export with its kind,
 * its category (`@category`) and its comment, re-exports followed to where they are defined.
 *
 * Run: npm run docs:api        (writes docs/api; `test/docs/Api.test.ts` checks it is current)
 *      npx tsx scripts/api-docs.ts --out DIR
 */
import * as Fs from "node:fs"
import * as Path from "node:path"

const ROOT = Path.resolve(import.meta.dirname, "..")

/** The pages: a title and the module file it documents. */
const ENTRY_PAGES: ReadonlyArray<readonly [title: string, file: string]> = [
  ["gyre/rewards", "rewards/index.ts"],
  ["gyre/testing", "src/testing/index.ts"],
  ["gyre/runner", "src/entry/runner.ts"],
  ["gyre/embedded", "src/entry/embedded.ts"],
  ["gyre/http", "src/entry/http.ts"],
  ["gyre/mcp", "src/mcp/index.ts"],
]

/** `gyre`'s namespaces (`export * as X from "./X.ts"` in src/index.ts). */
const namespaces = (): Array<readonly [string, string]> =>
  [...Fs.readFileSync(Path.join(ROOT, "src/index.ts"), "utf8").matchAll(/^export \* as (\w+) from "\.\/([\w/]+\.ts)"/gm)].map((m) => [`gyre: ${m[1]}`, `src/${m[2]}`] as const)

interface Entry {
  readonly name: string
  readonly kind: string
  readonly category: string
  readonly doc: string
}

/** A doc comment's text without its `*` margins and its `@` tags. */
const clean = (comment: string): { readonly text: string; readonly category: string } => {
  const body = comment.replace(/^\/\*\*|\*\/$/g, "").split("\n").map((l) => l.replace(/^\s*\* ?/, "")).join("\n").trim()
  const category = /@category (\w[\w ]*)/.exec(body)?.[1]?.trim() ?? "other"
  const text = body.split("\n").filter((l) => !/^@(since|category|example)/.test(l.trim())).join("\n").replace(/\s*@since [\d.]+\s*/g, " ").replace(/@category [\w ]+/g, "").trim()
  return { text: text.split(/\n@example/)[0]!.trim(), category }
}

/** The module's own exports with their comments, and the names it re-exports from other files. */
const exportsOf = (file: string, only?: ReadonlySet<string>, seen = new Set<string>()): Array<Entry> => {
  if (seen.has(file) || !Fs.existsSync(file)) return []
  seen.add(file)
  const text = Fs.readFileSync(file, "utf8")
  const out: Array<Entry> = []
  for (const m of text.matchAll(/(\/\*\*(?:(?!\*\/)[\s\S])*?\*\/)\s*export (?:declare )?(const|class|interface|type|function|namespace)\s+(\w+)/g)) {
    if (only !== undefined && !only.has(m[3]!)) continue
    const { text: doc, category } = clean(m[1]!)
    out.push({ name: m[3]!, kind: m[2]!, category, doc })
  }
  for (const m of text.matchAll(/^export (?:type )?\{([^}]*)\} from "(\.{1,2}\/[\w./]+\.ts)"/gm)) {
    const names = new Set(m[1]!.split(",").map((n) => n.replace(/\/\*\*[\s\S]*?\*\//g, "").replace(/^\s*type\s+/, "").split(/\s+as\s+/)[0]!.trim()).filter((n) => n !== ""))
    const wanted = only === undefined ? names : new Set([...names].filter((n) => only.has(n)))
    out.push(...exportsOf(Path.resolve(Path.dirname(file), m[2]!), wanted, seen))
  }
  return out
}

/** The module's own comment: its first doc comment, when it precedes any code. */
const moduleDoc = (file: string): string => {
  const m = /^\s*(?:#![^\n]*\n)?\s*(\/\*\*[\s\S]*?\*\/)/.exec(Fs.readFileSync(file, "utf8"))
  return m === null ? "" : clean(m[1]!).text
}

const pageName = (title: string) => `${title.replace(/^gyre: /, "").replace("gyre/", "gyre-").replace(/[^\w-]/g, "")}.md`

const render = (title: string, file: string): string => {
  const entries = exportsOf(Path.join(ROOT, file))
  const byCategory = new Map<string, Array<Entry>>()
  for (const e of entries) byCategory.set(e.category, [...(byCategory.get(e.category) ?? []), e])
  const sections = [...byCategory.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([category, list]) =>
    [`## ${category}`, "", ...list.sort((a, b) => a.name.localeCompare(b.name)).flatMap((e) => [`### ${e.name}`, "", `\`${e.kind}\``, "", e.doc || "(no comment)", ""])].join("\n")
  )
  return [`# ${title}`, "", `Source: [${file}](../../${file})`, "", moduleDoc(Path.join(ROOT, file)), "", ...sections].join("\n").replace(/\n{3,}/g, "\n\n").trimEnd() + "\n"
}

/** Every page of the reference, by file name, and its index. */
export const generate = (): Map<string, string> => {
  const pages = new Map<string, string>()
  const all = [...namespaces(), ...ENTRY_PAGES]
  for (const [title, file] of all) pages.set(pageName(title), render(title, file))
  const index = [
    "# API reference",
    "",
    "Generated from the doc comments by `npm run docs:api` (`scripts/api-docs.ts`); do not edit by hand.",
    "",
    ...all.map(([title, file]) => `- [${title}](${pageName(title)}): ${moduleDoc(Path.join(ROOT, file)).split("\n\n")[0]!.replace(/\n/g, " ")}`),
  ].join("\n") + "\n"
  pages.set("README.md", index)
  return pages
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const at = process.argv.indexOf("--out")
  const out = at >= 0 ? Path.resolve(process.argv[at + 1]!) : Path.join(ROOT, "docs", "api")
  Fs.rmSync(out, { recursive: true, force: true })
  Fs.mkdirSync(out, { recursive: true })
  const pages = generate()
  for (const [name, text] of pages) Fs.writeFileSync(Path.join(out, name), text)
  console.log(`wrote ${pages.size} pages to ${Path.relative(process.cwd(), out) || "."}`)
}
