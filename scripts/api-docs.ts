/**
 * The API reference in docs/api, generated from gyre's public modules: one page per
 * namespace of `gyre` (and per other entry point), each export with its signature as the
 * compiler declares it, its parameters, what it returns (for an Effect: what it succeeds
 * with, fails with and requires), its comment with `{@link}`s resolved to the pages that
 * document them, and its examples as fenced code; re-exports are followed to where they are
 * defined.
 *
 * Run: npm run docs:api        (writes docs/api; `test/docs/Api.test.ts` checks it is current)
 *      npx tsx scripts/api-docs.ts --out DIR
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { declarationsOf, effectParts, emitDeclarations, functionShape } from "./Declarations.ts"

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
  readonly examples: ReadonlyArray<string>
  /** the source file that defines it */
  readonly file: string
}

/** A doc comment's text without its `*` margins and its `@` tags, and its `@example` code. */
const clean = (comment: string): { readonly text: string; readonly category: string; readonly examples: ReadonlyArray<string> } => {
  const body = comment.replace(/^\/\*\*|\*\/$/g, "").split("\n").map((l) => l.replace(/^\s*\* ?/, "")).join("\n").trim()
  const category = /@category (\w[\w ]*)/.exec(body)?.[1]?.trim() ?? "other"
  const [prose = "", ...exampleParts] = body.split(/^\s*@example\b/m)
  const stripTags = (s: string) => s.replace(/\s*@since [\d.]+\s*/g, " ").replace(/@category [\w ]+/g, "").trim()
  const examples = exampleParts.map((e) => e.split(/^\s*@(?!example)\w+/m)[0]!.replace(/^```\w*\n?|```\s*$/gm, "")).map((e) => stripTags(e).replace(/^\n+|\s+$/g, "")).filter((e) => e !== "")
  const text = stripTags(prose.split("\n").filter((l) => !/^@(since|category)/.test(l.trim())).join("\n"))
  return { text, category, examples }
}

/** The module's own exports with their comments, and the names it re-exports from other files. */
const exportsOf = (file: string, only?: ReadonlySet<string>, seen = new Set<string>()): Array<Entry> => {
  // a file re-exported twice (a type list, then a value list) is read once per list
  const key = `${file}:${only === undefined ? "*" : [...only].sort().join(",")}`
  if (seen.has(key) || !Fs.existsSync(file)) return []
  seen.add(key)
  const text = Fs.readFileSync(file, "utf8")
  const out: Array<Entry> = []
  for (const m of text.matchAll(/(\/\*\*(?:(?!\*\/)[\s\S])*?\*\/)\s*export (?:declare )?(const|class|interface|type|function|namespace)\s+(\w+)/g)) {
    if (only !== undefined && !only.has(m[3]!)) continue
    const { text: doc, category, examples } = clean(m[1]!)
    out.push({ name: m[3]!, kind: m[2]!, category, doc, examples, file })
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

/** Where each documented name is: its page and anchor, for `{@link}`. */
type LinkIndex = ReadonlyMap<string, string>

/** `{@link X}`, `{@link X text}` and `{@link X | text}` as Markdown links to X's entry (code when X has none). */
const resolveLinks = (text: string, links: LinkIndex, page: string): string =>
  text.replace(/\{@link\s+([\w.]+)(?:\s*\|\s*|\s+)?([^}]*)\}/g, (_, target: string, label: string) => {
    const name = target.split(".").at(-1)!
    const at = links.get(`${page}#${name}`) ?? links.get(name)
    const shown = label.trim() === "" ? `\`${target}\`` : label.trim()
    return at === undefined ? shown : `[${shown}](${at})`
  })

/** A type as inline code, or a pointer to the signature when it is too long to read inline. */
const typeText = (type: string) => (type.length <= 160 ? `\`${type}\`` : "the type in the signature above")

const MAX_LINES = 40

/** The entry's signature block, parameters and return, from its declarations. */
const signature = (e: Entry, declDir: string): Array<string> => {
  const dts = Path.join(declDir, Path.relative(ROOT, e.file).replace(/\.ts$/, ".d.ts"))
  const decls = Fs.existsSync(dts) ? declarationsOf(Fs.readFileSync(dts, "utf8"), e.name) : []
  if (decls.length === 0) return []
  const lines = decls.join("\n").split("\n")
  const shown = lines.length > MAX_LINES ? [...lines.slice(0, MAX_LINES), `// ... ${lines.length - MAX_LINES} more lines in ${Path.relative(ROOT, e.file)}`] : lines
  const out = ["```ts", ...shown, "```", ""]
  const shape = functionShape(decls[0]!)
  if (shape === undefined) return out
  if (shape.parameters.length > 0) {
    out.push("| parameter | type |", "|---|---|", ...shape.parameters.map((p) => `| \`${p.name}\` | \`${p.type.replace(/\|/g, "\\|")}\` |`), "")
  }
  const effect = effectParts(shape.returns)
  if (effect === undefined) out.push(`**Returns** ${typeText(shape.returns)}`, "")
  else {
    out.push(
      "**Returns** an `Effect` that",
      "",
      `- succeeds with ${typeText(effect.success)}`,
      `- ${effect.failure === "never" ? "cannot fail" : `fails with ${typeText(effect.failure)}`}`,
      `- ${effect.requires === "never" ? "requires no service" : `requires ${typeText(effect.requires)}`}`,
      "",
    )
  }
  return out
}

const renderEntry = (e: Entry, page: string, links: LinkIndex, declDir: string): Array<string> => [
  `### ${e.name}`,
  "",
  `\`${e.kind}\``,
  "",
  ...signature(e, declDir),
  resolveLinks(e.doc, links, page) || "(no comment)",
  "",
  ...e.examples.flatMap((x) => ["**Example**", "", "```ts", x, "```", ""]),
]

const render = (title: string, file: string, links: LinkIndex, declDir: string): string => {
  const entries = exportsOf(Path.join(ROOT, file))
  const page = pageName(title)
  const byCategory = new Map<string, Array<Entry>>()
  for (const e of entries) byCategory.set(e.category, [...(byCategory.get(e.category) ?? []), e])
  const sections = [...byCategory.entries()].sort(([a], [b]) => a.localeCompare(b)).map(([category, list]) =>
    [`## ${category}`, "", ...list.sort((a, b) => a.name.localeCompare(b.name)).flatMap((e) => renderEntry(e, page, links, declDir))].join("\n")
  )
  return [`# ${title}`, "", `Source: [${file}](../../${file})`, "", resolveLinks(moduleDoc(Path.join(ROOT, file)), links, page), "", ...sections].join("\n").replace(/\n{3,}/g, "\n\n").trimEnd() + "\n"
}

/** Every entry's page and anchor, by name (and by page#name, for a name on several pages). */
const linkIndex = (all: ReadonlyArray<readonly [string, string]>): LinkIndex => {
  const links = new Map<string, string>()
  for (const [title, file] of all) {
    const page = pageName(title)
    for (const e of exportsOf(Path.join(ROOT, file))) {
      const at = `${page}#${e.name.toLowerCase()}`
      links.set(`${page}#${e.name}`, at)
      if (!links.has(e.name)) links.set(e.name, at)
    }
  }
  return links
}

/** Every page of the reference, by file name, and its index. */
export const generate = (): Map<string, string> => {
  const pages = new Map<string, string>()
  const all = [...namespaces(), ...ENTRY_PAGES]
  const links = linkIndex(all)
  const declDir = emitDeclarations()
  try {
    for (const [title, file] of all) pages.set(pageName(title), render(title, file, links, declDir))
  } finally {
    Fs.rmSync(declDir, { recursive: true, force: true })
  }
  const index = [
    "# API reference",
    "",
    "Generated from the declarations and doc comments by `npm run docs:api` (`scripts/api-docs.ts`); do not edit by hand.",
    "",
    ...all.map(([title, file]) => `- [${title}](${pageName(title)}): ${resolveLinks(moduleDoc(Path.join(ROOT, file)).split("\n\n")[0]!.replace(/\n/g, " "), links, pageName(title))}`),
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
