/**
 * The computer-algebra side of math answers: LaTeX parsed to MathJSON and evaluated by the
 * Compute Engine (`@cortex-js/compute-engine`), loaded on first use.
 *
 * Why this library: it parses LaTeX itself (fractions, roots, trigonometry, implicit
 * products, `\pi`, `e`, percentages, matrices) into a canonical MathJSON form, evaluates it
 * numerically and compiles it to JavaScript for fast sampling. Version 0.27.0 is the newest
 * that declares Node >= 16 (later ones declare Node >= 21.7.3, which a Node 20 install
 * warns about); mathjs has no LaTeX reader and nerdamer's is partial. Two quirks of 0.27
 * are handled here: it remembers what it inferred about a symbol across parses (each parse
 * gets its own scope), and it misreads some letters and subscripts (`N` is its numeric
 * function, `S_{MBCN}` throws), so every letter is passed as an upright symbol first.
 *
 * @since 0.1.0
 */
import type { ComputeEngine } from "@cortex-js/compute-engine"

type BoxedExpression = ReturnType<ComputeEngine["parse"]>

/** A complex value; `im` is 0 for reals. @since 0.1.0 @category models */
export interface Value {
  readonly re: number
  readonly im: number
}

/** One expression read by the engine. @since 0.1.0 @category models */
export interface Leaf {
  /** the LaTeX the engine parsed */
  readonly latex: string
  /** its canonical MathJSON, as text (equal texts: the same expression) */
  readonly json: string
  /** its free variables, sorted */
  readonly symbols: ReadonlyArray<string>
  /** an atomic number: `float` when written with a decimal point (compared after rounding) */
  readonly number: "exact" | "float" | undefined
  /** its value with the variables set (undefined: not a finite number there) */
  readonly at: (point: Readonly<Record<string, number>>) => Value | undefined
}

/** The engine, ready: a LaTeX expression to a `Leaf`, or undefined when it cannot read it. @since 0.1.0 @category models */
export interface Cas {
  readonly parse: (latex: string) => Leaf | undefined
}

const COMMAND = /^\\([a-zA-Z]+|.)/
const VERBATIM = new Set(["begin", "end", "operatorname", "text", "mathrm", "mbox", "textbf", "mathbf", "mathit", "textit"])
const NAME_CHAR: Record<string, string> = { "-": "m", "+": "p", ",": "c", "*": "t" }

/** The text of a `{...}` group at `i` (or one character), and where it ends. */
const groupAt = (s: string, i: number): [string, number] => {
  if (s[i] !== "{") return [s[i] ?? "", i + 1]
  let depth = 0
  for (let j = i; j < s.length; j++) {
    if (s[j] === "{") depth++
    else if (s[j] === "}" && --depth === 0) return [s.slice(i + 1, j), j + 1]
  }
  return [s.slice(i + 1), s.length]
}

/**
 * Every Latin letter as an upright symbol (`x` → `\mathrm{x}`), and a letter with a
 * subscript as one symbol (`x_{1}` → `\mathrm{x_1}`), so the engine reads them as plain
 * variables. Command names and their verbatim arguments are kept.
 * @since 0.1.0 @category utils
 */
export const uprightSymbols = (latex: string): string => {
  let out = ""
  for (let i = 0; i < latex.length;) {
    const c = latex[i]!
    if (c === "\\") {
      const name = COMMAND.exec(latex.slice(i))![1]!
      out += "\\" + name
      i += name.length + 1
      if (VERBATIM.has(name)) {
        while (latex[i] === " ") i++
        const [arg, end] = groupAt(latex, i)
        if (latex[i] === "{") (out += `{${arg}}`), (i = end)
      }
      continue
    }
    if (/[a-zA-Z]/.test(c)) {
      if (latex[i + 1] === "_") {
        const [sub, end] = groupAt(latex, i + 2)
        if (/^[a-zA-Z0-9+\-*, ]+$/.test(sub)) {
          out += `\\mathrm{${c}_${sub.replace(/\s/g, "").replace(/[^a-zA-Z0-9]/g, (ch) => NAME_CHAR[ch] ?? "")}}`
          i = end
          continue
        }
      }
      out += `\\mathrm{${c}}`
      i++
      continue
    }
    out += c
    i++
  }
  return out
}

const numberKind = (latex: string): Leaf["number"] => {
  const t = latex.replace(/\s|\\[,;!]/g, "")
  if (/^-?\d*\.\d+(\\?%)?$/.test(t)) return "float"
  if (/^-?\d+(\\?%)?$/.test(t) || /^-?\\frac\{-?\d+\}\{-?\d+\}$/.test(t)) return "exact"
  return undefined
}

const finite = (v: Value): Value | undefined => (Number.isFinite(v.re) && Number.isFinite(v.im) ? v : undefined)

/** A value of a numeric result: a JS number or the engine's complex. */
const valueOf = (x: unknown): Value | undefined => {
  if (typeof x === "number") return finite({ re: x, im: 0 })
  if (typeof x === "object" && x !== null && "re" in x && "im" in x) return finite({ re: Number(x.re), im: Number(x.im) })
  return undefined
}

/** The value of an expression by the engine's own numeric evaluation (slower than compiled). */
const evaluate = (ce: ComputeEngine, expr: BoxedExpression, point: Readonly<Record<string, number>>): Value | undefined => {
  try {
    const subs = Object.fromEntries(Object.entries(point).map(([k, v]) => [k, ce.number(v)]))
    const n = (Object.keys(subs).length > 0 ? expr.subs(subs) : expr).N()
    return n.isNumberLiteral ? finite({ re: n.re, im: n.im }) : undefined
  } catch {
    return undefined
  }
}

const toLeaf = (ce: ComputeEngine, latex: string, expr: BoxedExpression): Leaf => {
  let compiled: ((args?: Record<string, number>) => unknown) | undefined
  try {
    compiled = expr.compile() as typeof compiled
  } catch {
    compiled = undefined
  }
  const symbols = [...expr.unknowns].sort()
  const constant = symbols.length === 0 ? evaluate(ce, expr, {}) : undefined
  const at = (point: Readonly<Record<string, number>>): Value | undefined => {
    if (symbols.length === 0) return constant
    try {
      const v = valueOf(compiled?.({ ...point }))
      if (v !== undefined) return v
    } catch {
      // fall back to the engine's evaluation
    }
    return evaluate(ce, expr, point)
  }
  return { latex, json: JSON.stringify(expr.json), symbols, number: numberKind(latex), at }
}

const MAX_CACHED = 20_000

const make = (ce: ComputeEngine): Cas => {
  // leaves never change: the same LaTeX (a gold, a common answer) is parsed once
  const cache = new Map<string, Leaf | undefined>()
  const parse = (latex: string): Leaf | undefined => {
    if (cache.has(latex)) return cache.get(latex)
    if (cache.size >= MAX_CACHED) cache.clear()
    const leaf = parseFresh(ce, latex)
    cache.set(latex, leaf)
    return leaf
  }
  return { parse }
}

const parseFresh = (ce: ComputeEngine, latex: string): Leaf | undefined => {
  const prepared = uprightSymbols(latex).replace(/(?<!\\)%/g, "\\%")
  ce.pushScope()
  try {
    const expr = ce.parse(prepared)
    const json = JSON.stringify(expr.json)
    if (json.includes('"Error"') || json.includes("'Error'")) return undefined
    return toLeaf(ce, latex, expr)
  } catch {
    return undefined
  } finally {
    ce.popScope()
  }
}

let loading: Promise<Cas> | undefined

/**
 * The engine, imported on first use (a few hundred kilobytes of code that `gyre/rewards`
 * does not load until a math answer is checked).
 * @since 0.1.0 @category constructors
 */
export const loadCas = (): Promise<Cas> =>
  (loading ??= import("@cortex-js/compute-engine").then((m) => make(new m.ComputeEngine())))
