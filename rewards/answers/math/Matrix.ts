/**
 * Matrices in LaTeX (`pmatrix`, `bmatrix`, `matrix`, `array`, ...) read entry by entry, and
 * sums and products of them written out (`A + B`, `A B`), computed entry by entry.
 *
 * @since 0.1.0
 */
import type { Answer } from "./Answer.ts"
import type { Cas, Leaf } from "./Cas.ts"
import { splitTop } from "./Split.ts"

const ENV = /^\s*\\begin\{([a-zA-Z]*matrix|array)\}(\{[^{}]*\})?([\s\S]*?)\\end\{\1\}\s*/

type Grid = Array<Array<string>>

/** The entries of one matrix environment, and the text after it. */
const gridAt = (latex: string): { grid: Grid; rest: string } | undefined => {
  const m = ENV.exec(latex)
  if (m === null) return undefined
  const rows = splitTop(m[3]!, ["\\\\"]).parts.filter((r) => r.trim() !== "")
  return { grid: rows.map((r) => splitTop(r, ["&"]).parts.map((c) => c.trim())), rest: latex.slice(m[0].length) }
}

const product = (a: Grid, b: Grid): Grid | undefined => {
  if (a[0]!.length !== b.length) return undefined
  return a.map((row) => b[0]!.map((_, j) => row.map((x, k) => `(${x})(${b[k]![j]})`).join("+")))
}

/** One term of a sum: matrices side by side, multiplied. */
const termGrid = (latex: string): Grid | undefined => {
  let rest = latex.trim()
  let acc: Grid | undefined
  while (rest !== "") {
    const next = gridAt(rest)
    if (next === undefined) return undefined
    acc = acc === undefined ? next.grid : product(acc, next.grid)
    if (acc === undefined) return undefined
    rest = next.rest.trim()
  }
  return acc
}

/**
 * A matrix, or a sum of products of matrices, as its entries; undefined when some entry
 * cannot be read or the shapes do not fit.
 * @since 0.1.0 @category utils
 */
export const readMatrix = (cas: Cas, latex: string): Answer | undefined => {
  const terms = splitTop(latex, ["+"]).parts.map(termGrid)
  if (terms.some((t) => t === undefined) || terms.length === 0) return undefined
  const grids = terms as Array<Grid>
  const [first] = grids
  const shapeOk = grids.every((g) => g.length === first!.length && g.every((row, i) => row.length === first![i]!.length))
  if (!shapeOk || first!.some((row) => row.length !== first![0]!.length)) return undefined
  const rows: Array<Array<Leaf>> = []
  for (let i = 0; i < first!.length; i++) {
    const row: Array<Leaf> = []
    for (let j = 0; j < first![i]!.length; j++) {
      const latexEntry = grids.length === 1 ? grids[0]![i]![j]! : grids.map((g) => `(${g[i]![j]})`).join("+")
      const leaf = cas.parse(latexEntry)
      if (leaf === undefined) return undefined
      row.push(leaf)
    }
    rows.push(row)
  }
  return { kind: "matrix", rows }
}
