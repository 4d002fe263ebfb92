/**
 * Reference pages generated from the code, so they cannot drift from it:
 *
 *   docs/reference/cli.md          every flag of every `gyre` command, from the commands'
 *                                  own definitions (src/cli/commands.ts), global flags too
 *   docs/reference/env-options.md  the options of Env.make, Episode.make, Agent.env and
 *                                  Game.env, from their interfaces' doc comments
 *
 * Run: npm run docs:reference   (test/docs/Reference.test.ts checks the pages are current)
 */
import * as Fs from "node:fs"
import * as Path from "node:path"
import { Option } from "effect"
import { Command, GlobalFlag, type HelpDoc } from "effect/cli"
import { availableEnvs } from "../src/app/LoadEnv.ts"
import { gyreCommand } from "../src/cli/commands.ts"

const ROOT = Path.resolve(import.meta.dirname, "..")

// ===== the CLI =====

interface CommandNode {
  readonly buildHelpDoc: (path: ReadonlyArray<string>) => HelpDoc.HelpDoc
  readonly subcommands: ReadonlyArray<{ readonly commands: ReadonlyArray<CommandNode & { readonly name: string }> }>
}

// the shipped envs change as envs/ does: the page names where they are, not the list of the day
const cell = (text: string) => text.replace(availableEnvs().join(", "), "`gyre run --help` lists them").replace(/\|/g, "\\|").replace(/\s*\n\s*/g, " ")
const flagName = (f: HelpDoc.FlagDoc) => [`--${f.name}`, ...f.aliases].join(", ")
const flagValue = (f: HelpDoc.FlagDoc) => (f.type === "boolean" ? "" : f.type.startsWith("<") ? ` ${f.type}` : ` <${f.type}>`)

const flagTable = (flags: ReadonlyArray<HelpDoc.FlagDoc>): Array<string> =>
  flags.length === 0 ? [] : [
    "| flag | what it does |",
    "|---|---|",
    ...flags.map((f) => `| \`${cell(flagName(f) + flagValue(f))}\` | ${cell(Option.getOrElse(f.description, () => ""))}${f.required ? " (required)" : ""} |`),
    "",
  ]

/** One command's section, then its subcommands'. */
const commandSection = (command: CommandNode, path: ReadonlyArray<string>): Array<string> => {
  const doc = command.buildHelpDoc(path)
  const args = doc.args ?? []
  const own = [
    `## ${path.join(" ")}`,
    "",
    cell(doc.description),
    "",
    "```",
    doc.usage,
    "```",
    "",
    ...(args.length === 0 ? [] : [
      "| argument | what it is |",
      "|---|---|",
      ...args.map((a) => `| \`<${a.name}>\`${a.required ? "" : " (optional)"} | ${cell(Option.getOrElse(a.description, () => ""))} |`),
      "",
    ]),
    ...flagTable(doc.flags),
    ...((doc.examples ?? []).length === 0 ? [] : ["Examples:", "", "```bash", ...doc.examples!.map((e) => `gyre ${e.command}${e.description === undefined ? "" : `    # ${e.description}`}`), "```", ""]),
  ]
  const subs = command.subcommands.flatMap((g) => g.commands).flatMap((c) => commandSection(c, [...path, c.name]))
  return [...own, ...subs]
}

/** The flags every command takes (`--help`, `--log-level`, ...), as the CLI defines them. */
const globalFlags = (): ReadonlyArray<HelpDoc.FlagDoc> => {
  const holder = Command.make("global", Object.fromEntries(GlobalFlag.BuiltIns.map((g, i) => [`f${i}`, g.flag]))) as unknown as CommandNode
  return holder.buildHelpDoc(["global"]).flags
}

export const cliPage = (): string =>
  [
    "# The gyre command line",
    "",
    "Generated from the commands' own definitions (`src/cli/`) by `npm run docs:reference`; do not edit by hand.",
    "`gyre <command> --help` prints the same. In a clone, `npx tsx run <env>` is `gyre run <env>`.",
    "",
    "## Flags of every command",
    "",
    ...flagTable(globalFlags()),
    ...commandSection(gyreCommand as unknown as CommandNode, ["gyre"]),
  ].join("\n").replace(/\n{3,}/g, "\n\n").trimEnd() + "\n"

// ===== the options of the env constructors =====

interface Member {
  readonly name: string
  readonly optional: boolean
  readonly type: string
  readonly doc: string
}

/** The `{ ... }` body that starts at the first `{` after `anchor` in `file`. */
const bodyAfter = (file: string, anchor: string): string => {
  const text = Fs.readFileSync(Path.join(ROOT, file), "utf8")
  const at = text.indexOf(anchor)
  if (at < 0) throw new Error(`${file}: no "${anchor}" (scripts/reference-docs.ts names the interfaces it documents: update it)`)
  const open = text.indexOf("{", at + anchor.length)
  let depth = 0
  for (let i = open; i < text.length; i++) {
    if (text[i] === "{") depth++
    else if (text[i] === "}" && --depth === 0) return text.slice(open + 1, i)
  }
  throw new Error(`${file}: "${anchor}" has no closing brace`)
}

/** A body's members at its top level: each one's doc comment, name, optionality and type. */
const membersOf = (body: string): Array<Member> => {
  const out: Array<Member> = []
  let depth = 0
  let doc = ""
  let current = ""
  const flush = () => {
    const m = /^readonly\s+(\w+)(\?)?:\s*([\s\S]*)$/.exec(current.trim())
    if (m !== null) out.push({ name: m[1]!, optional: m[2] === "?", type: m[3]!.replace(/\s+/g, " ").trim(), doc })
    current = ""
    doc = ""
  }
  for (const line of body.split("\n")) {
    const trimmed = line.trim()
    if (depth === 0 && (trimmed.startsWith("/**") || trimmed.startsWith("readonly ") || trimmed.startsWith("//"))) {
      if (current !== "") flush()
      if (trimmed.startsWith("/**")) doc = ""
    }
    if (depth === 0 && (trimmed.startsWith("/**") || trimmed.startsWith("*") || trimmed.startsWith("//"))) {
      if (!trimmed.startsWith("//")) doc += " " + trimmed.replace(/^\/\*\*|\*\/$|^\*/g, "").trim()
      continue
    }
    current += "\n" + line
    for (const ch of line.replace(/=>/g, "")) {
      if ("{([".includes(ch)) depth++
      else if ("})]".includes(ch)) depth--
    }
  }
  if (current !== "") flush()
  return out.map((m) => ({ ...m, doc: m.doc.replace(/@since [\d.]+|@category \w+/g, "").replace(/\s+/g, " ").trim() }))
}

const optionTable = (members: ReadonlyArray<Member>, skip: ReadonlyArray<string> = [], allOptional = false): Array<string> => [
  "| option | type | what it is |",
  "|---|---|---|",
  ...members.filter((m) => !skip.includes(m.name)).map((m) =>
    `| \`${m.name}\`${m.optional || allOptional ? "" : " (required)"} | \`${cell(m.type)}\` | ${cell(m.doc || "(no comment)")} |`
  ),
  "",
]

const from = (file: string, anchor: string) => membersOf(bodyAfter(file, anchor))

export const envOptionsPage = (): string => {
  const envFields = from("src/env/Definition.ts", "export interface EnvFields<")
  const services = from("src/env/Definition.ts", "export interface EnvSpec<")
  const game = from("src/game/Spec.ts", "export interface Game<")
  const gameOwn = from("src/vocabulary/Game.ts", "& Partial<Pick<Game<P, S>")
  return [
    "# Options of Env.make, Episode.make, Agent.env and Game.env",
    "",
    "Generated from the doc comments of their interfaces by `npm run docs:reference`; do not edit by hand.",
    "Each table names the file it is read from; the [guides](../../README.md#guides) show them in use.",
    "",
    "## Env.make",
    "",
    "`Env.make({ ... })` (`src/env/Definition.ts`, `EnvFields` and `EnvSpec`): an env made by `Agent.env` or `Game.env` has these options too (but `episode`, `agent` and `game`, which they set).",
    "",
    ...optionTable([...envFields, ...services], ["agent", "game"]),
    "### eval",
    "",
    "`eval: { ... }` (`EvalSpec`)",
    "",
    ...optionTable(from("src/env/Definition.ts", "export interface EvalSpec")),
    "### defaults",
    "",
    "`defaults: { ... }` (`RunDefaults`): flags override them.",
    "",
    ...optionTable(from("src/env/Definition.ts", "export interface RunDefaults"), [], true),
    ...(Fs.readFileSync(Path.join(ROOT, "src/env/Definition.ts"), "utf8").includes("export interface ChatOptions")
      ? ["### chat", "", "`chat: { ... }` (`ChatOptions`)", "", ...optionTable(from("src/env/Definition.ts", "export interface ChatOptions"))]
      : []),
    "## Episode.make",
    "",
    "`Episode.make({ ... })` (`src/env/Episode.ts`): a multi-turn episode, the `episode` option of `Env.make`.",
    "",
    ...optionTable(from("src/env/Episode.ts", "export const make = <P, S,")),
    "### limits",
    "",
    "`limits: { ... }` (`Limits`): every key is optional.",
    "",
    ...optionTable(from("src/env/Episode.ts", "export interface Limits"), [], true),
    "## Agent.env",
    "",
    "`Agent.env({ ... })` (`src/vocabulary/Agent.ts`): Env.make's options without `episode`, `prompt` optional, and:",
    "",
    ...optionTable(from("src/vocabulary/Agent.ts", "export type AgentEnvInput<")),
    "### limits",
    "",
    "`limits: { ... }` (`Limits` of `src/agent/Spec.ts`): every key is optional.",
    "",
    ...optionTable(from("src/agent/Spec.ts", "export interface Limits"), [], true),
    "## Game.env",
    "",
    "`Game.env({ ... })` (`src/vocabulary/Game.ts` and the rules of `src/game/Spec.ts`): Env.make's options without `episode`, and:",
    "",
    ...optionTable([
      ...game.map((m) => ({ ...m, optional: ["illegal", "maxMoves", "players", "evalPlayers"].includes(m.name) })),
      ...gameOwn,
    ]),
  ].join("\n").replace(/\n{3,}/g, "\n\n").trimEnd() + "\n"
}

/** Every generated page, by its path under the repository. */
export const generate = (): Map<string, string> =>
  new Map([
    ["docs/reference/cli.md", cliPage()],
    ["docs/reference/env-options.md", envOptionsPage()],
  ])

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const [file, text] of generate()) {
    Fs.mkdirSync(Path.dirname(Path.join(ROOT, file)), { recursive: true })
    Fs.writeFileSync(Path.join(ROOT, file), text)
    console.log(`wrote ${file}`)
  }
}
