/**
 * The code blocks of the README and of `docs/` (not the generated reference pages), as the
 * docs tests read them. Not a test: shared by test/readme.test.ts (TypeScript blocks,
 * in-process) and test/docs/Commands.test.ts (shell commands, as processes).
 *
 * A block may be preceded by one HTML comment that the tests honour:
 *   <!-- not run: <why> -->      the block is checked for nothing but counted as skipped
 *   <!-- file: <path> -->        a file of the user's project (a server, say): written at
 *                                its path, typechecked, never imported as a module
 */
import * as Fs from "node:fs"
import * as Path from "node:path"

export const root = Path.resolve(import.meta.dirname, "../..")

/** The pages whose blocks are checked: the README and every page of docs/ (not docs/api or docs/reference). */
export const PAGES = ["README.md", ...Fs.readdirSync(Path.join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)]

export interface Block {
  readonly page: string
  /** the line of the opening fence */
  readonly line: number
  readonly lang: string
  /** the block's text, unindented */
  readonly code: string
  /** why the block is not run (`<!-- not run: ... -->`), if it is not */
  readonly notRun: string | undefined
  /** the project path it is a file of (`<!-- file: ... -->`), if it is one */
  readonly file: string | undefined
}

/** Every fenced block of `page`, with its marker. */
export const blocksOf = (page: string): Array<Block> => {
  const text = Fs.readFileSync(Path.join(root, page), "utf8")
  return [...text.matchAll(/^( *)```(\w*)\n([\s\S]*?)^\1```/gm)].map((m) => {
    const before = text.slice(0, m.index).trimEnd()
    const marker = /<!--\s*(not run|file):\s*([\s\S]*?)\s*-->$/.exec(before)
    return {
      page,
      line: text.slice(0, m.index).split("\n").length,
      lang: m[2]!,
      code: m[3]!.split("\n").map((l) => (l.startsWith(m[1]!) ? l.slice(m[1]!.length) : l)).join("\n"),
      notRun: marker?.[1] === "not run" ? marker[2] : undefined,
      file: marker?.[1] === "file" ? marker[2] : undefined,
    }
  })
}

export const allBlocks = (): Array<Block> => PAGES.flatMap(blocksOf)

/** The shell commands of a block: its lines, continuation lines joined, comments dropped. */
export const commandsOf = (block: Block): Array<string> =>
  block.code.replace(/\\\n\s*/g, " ").split("\n").map((l) => l.replace(/\s+#.*$/, "").trim()).filter((l) => l !== "" && !l.startsWith("#"))
