/**
 * The declarations (`.d.ts`) of gyre's public modules, as the compiler emits them, read for
 * the API reference (scripts/api-docs.ts): each export's signature, its parameters, and what
 * it returns (for an Effect: what it succeeds with, fails with and requires). TypeScript 7
 * has no compiler API to ask, so the compiler emits the declarations once and this module
 * reads their text, which the compiler has already reduced to types.
 */
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"

const ROOT = Path.resolve(import.meta.dirname, "..")

/** Emits the declarations of tsconfig.build.json's files into a fresh folder and returns it. */
export const emitDeclarations = (): string => {
  const out = Fs.mkdtempSync(Path.join(Os.tmpdir(), "gyre-api-"))
  try {
    execFileSync(process.execPath, [Path.join(ROOT, "node_modules/typescript/lib/tsc.js"), "-p", "tsconfig.build.json", "--emitDeclarationOnly", "--outDir", out], { cwd: ROOT, stdio: "pipe" })
  } catch {
    // a type error elsewhere in the tree still emits every declaration
  }
  return out
}

/** Walks `text` from `start`, calling `at` with each character outside strings and comments and the bracket depth before it. */
const scan = (text: string, start: number, at: (ch: string, i: number, depth: number) => boolean): number => {
  let depth = 0
  for (let i = start; i < text.length; i++) {
    const ch = text[i]!
    if (ch === "/" && text[i + 1] === "*") {
      i = text.indexOf("*/", i + 2) + 1
      continue
    }
    if (ch === "\"" || ch === "'" || ch === "`") {
      for (i++; i < text.length && text[i] !== ch; i++) if (text[i] === "\\") i++
      continue
    }
    if (at(ch, i, depth)) return i
    if ("({[".includes(ch) || (ch === "<" && text[i - 1] !== "=")) depth++
    else if (")}]".includes(ch) || (ch === ">" && text[i - 1] !== "=")) depth--
  }
  return text.length
}

/** `items` split at its top-level commas. */
export const splitTop = (items: string): Array<string> => {
  const parts: Array<string> = []
  let from = 0
  scan(items, 0, (ch, i, depth) => {
    if (ch === "," && depth === 0) {
      parts.push(items.slice(from, i))
      from = i + 1
    }
    return false
  })
  parts.push(items.slice(from))
  return parts.map((p) => p.trim()).filter((p) => p !== "")
}

// `import("./Definition.ts").EnvError` reads as `EnvError`: the reference names types, not files
const tidy = (text: string) => text.replace(/\/\*\*[\s\S]*?\*\/\s*/g, "").replace(/import\("[^"]+"\)\./g, "").replace(/^\s*\n/gm, "").trimEnd()

/** Every declaration of `name` exported by the `.d.ts` text (overloads are several), without doc comments. */
export const declarationsOf = (dts: string, name: string): Array<string> => {
  const found: Array<string> = []
  const head = new RegExp(`^export (?:declare )?(?:abstract )?(const|function|class|interface|type|namespace|enum) ${name}\\b`, "gm")
  for (const m of dts.matchAll(head)) {
    const braced = ["class", "interface", "namespace", "enum"].includes(m[1]!)
    let opened = false
    const end = scan(dts, m.index, (ch, _i, depth) => {
      if (braced && ch === "{" && depth === 0) opened = true
      if (braced) return opened && ch === "}" && depth === 1
      return ch === ";" && depth === 0
    })
    found.push(tidy(dts.slice(m.index, end + 1).replace(/^export (declare )?/, "")))
  }
  return found
}

export interface FunctionShape {
  readonly parameters: ReadonlyArray<{ readonly name: string; readonly type: string }>
  readonly returns: string
}

/** The parameters and return type of a declared function or function-typed const (its first call signature). */
export const functionShape = (declaration: string): FunctionShape | undefined => {
  const m = /^(?:const \w+: |function \w+)/.exec(declaration)
  if (m === null) return undefined
  let i = m[0].length
  if (declaration[i] === "<") i = scan(declaration, i, (ch, _j, depth) => ch === ">" && depth === 1) + 1
  if (declaration[i] !== "(") return undefined
  const close = scan(declaration, i, (ch, _j, depth) => ch === ")" && depth === 1)
  const rest = declaration.slice(close + 1).trim()
  const arrow = /^(=>|:)\s*/.exec(rest)
  if (arrow === null) return undefined
  const parameters = splitTop(declaration.slice(i + 1, close)).map((p) => {
    const colon = scan(p, 0, (ch, _j, depth) => ch === ":" && depth === 0)
    return { name: p.slice(0, colon).trim(), type: p.slice(colon + 1).trim().replace(/\s+/g, " ") }
  })
  return { parameters, returns: rest.slice(arrow[0].length).replace(/;$/, "").replace(/\s+/g, " ").trim() }
}

/** An `Effect.Effect<A, E, R>` type's three parts (E and R `never` when left out); undefined for another type. */
export const effectParts = (type: string): { readonly success: string; readonly failure: string; readonly requires: string } | undefined => {
  const m = /^Effect(?:\.Effect)?</.exec(type)
  if (m === null || !type.endsWith(">")) return undefined
  const end = scan(type, m[0].length - 1, (ch, _i, depth) => ch === ">" && depth === 1)
  if (end !== type.length - 1) return undefined
  const [success = "void", failure = "never", requires = "never"] = splitTop(type.slice(m[0].length, -1))
  return { success, failure, requires }
}
