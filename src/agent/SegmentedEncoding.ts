/**
 * Encoding a conversation's text piece by piece, each piece once per episode.
 *
 * A tokenizer matches its special tokens (`<|im_start|>`, `<|im_end|>`, ...) before it
 * splits or merges anything else, so the text between two of them encodes the same
 * alone as inside the whole: a rendered conversation's tokens are its pieces' tokens,
 * joined by the special tokens' ids. Each request of an agent episode re-renders the
 * conversation so far, and the episodes of a group share their prompt; with the pieces'
 * tokens kept (the most recently used `capacity` of them), only the pieces that are new
 * are encoded.
 *
 * A piece boundary is a `<|...|>` text that the tokenizer encodes as one token which
 * decoding drops (a special token) and that leaves the text on either side of it
 * untouched (no whitespace stripped into it); each candidate is checked once per
 * tokenizer. Text with no such token is encoded whole, as before.
 *
 * @since 0.1.0
 */
import { Effect } from "effect"
import type { TokenizeError, TokenizerShape } from "../services/Tokenizer.ts"

/** The tokens of the pieces encoded lately, by piece: the `capacity` most recently used. @since 0.1.0 @category models */
export class Pieces {
  readonly #tokens = new Map<string, ReadonlyArray<number>>()
  constructor(readonly capacity = 4096) {}
  get size(): number {
    return this.#tokens.size
  }
  get(piece: string): ReadonlyArray<number> | undefined {
    const tokens = this.#tokens.get(piece)
    if (tokens !== undefined) {
      // the most recently used last: the first in the map goes when it is full
      this.#tokens.delete(piece)
      this.#tokens.set(piece, tokens)
    }
    return tokens
  }
  set(piece: string, tokens: ReadonlyArray<number>): void {
    this.#tokens.set(piece, tokens)
    if (this.#tokens.size > this.capacity) this.#tokens.delete(this.#tokens.keys().next().value!)
  }
}

const CANDIDATE = /<\|[^|<>\s]{1,40}\|>/g

/** Per tokenizer: each candidate text's token id when it is a clean boundary, else undefined. */
const boundaries = new WeakMap<TokenizerShape, Map<string, number | undefined>>()

const same = (a: ReadonlyArray<number>, b: ReadonlyArray<number>) => a.length === b.length && a.every((x, i) => x === b[i])

const boundaryId = Effect.fnUntraced(function* (tokenizer: TokenizerShape, text: string) {
  let known = boundaries.get(tokenizer)
  if (known === undefined) boundaries.set(tokenizer, (known = new Map()))
  if (known.has(text)) return known.get(text)
  const ids = yield* tokenizer.encode(text)
  let id: number | undefined
  if (ids.length === 1 && tokenizer.decode(ids) === "") {
    // whitespace on either side stays its own text (no lstrip / rstrip into the token)
    const before = yield* tokenizer.encode("a \n")
    const after = yield* tokenizer.encode("\n b")
    if (same(yield* tokenizer.encode(`a \n${text}\n b`), [...before, ids[0]!, ...after])) id = ids[0]
  }
  known.set(text, id)
  return id
})

const NONE: ReadonlyArray<number> = []

/** A piece not kept: encoded, and kept. */
const encodeNew = (tokenizer: TokenizerShape, pieces: Pieces, part: string) =>
  Effect.map(tokenizer.encode(part), (ids) => {
    pieces.set(part, ids)
    return ids
  })

/**
 * `tokenizer.encode(text)`, with the pieces between special tokens taken from `pieces`
 * when they were encoded before (and kept there when they were not).
 * @since 0.1.0 @category combinators
 */
export const encodePieces = Effect.fnUntraced(function* (tokenizer: TokenizerShape, pieces: Pieces, text: string) {
  const out: Array<number> = []
  // known boundaries and kept pieces are taken as they are: only what is new is an effect to run
  const take = (ids: ReadonlyArray<number>) => {
    for (let i = 0; i < ids.length; i++) out.push(ids[i]!)
  }
  let from = 0
  for (const m of text.matchAll(CANDIDATE)) {
    const known = boundaries.get(tokenizer)
    const id = known?.has(m[0]) === true ? known.get(m[0]) : yield* boundaryId(tokenizer, m[0])
    if (id === undefined) continue
    const part = text.slice(from, m.index)
    take(part === "" ? NONE : pieces.get(part) ?? (yield* encodeNew(tokenizer, pieces, part)))
    out.push(id)
    from = m.index + m[0].length
  }
  const rest = text.slice(from)
  take(rest === "" ? NONE : pieces.get(rest) ?? (yield* encodeNew(tokenizer, pieces, rest)))
  return out
}) as (tokenizer: TokenizerShape, pieces: Pieces, text: string) => Effect.Effect<Array<number>, TokenizeError>
