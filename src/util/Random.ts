/**
 * Seeded randomness: a 32-bit string hash and a small deterministic PRNG seeded from a
 * string key. Env sources hand it to generators; the runner, games and the agent
 * endpoint derive per-sample seeds from it. It depends on nothing, so every layer may use it.
 *
 * @since 0.1.0
 */
/** A small deterministic PRNG handed to generators. @since 0.1.0 @category models */
export interface Random {
  /** uniform in [0, 1) */
  readonly next: () => number
  /** uniform integer in [min, max] (inclusive) */
  readonly int: (min: number, max: number) => number
  /** one of `items`, uniformly (items must not be empty) */
  readonly pick: <A>(items: ReadonlyArray<A>) => A
  readonly bool: (p?: number) => boolean
}

/** 32-bit FNV-1a of a string. @since 0.1.0 @category utils */
export const hash32 = (text: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

/** A PRNG (mulberry32) seeded from any string key. @since 0.1.0 @category constructors */
export const random = (key: string): Random => {
  let state = hash32(key)
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    pick: (items) => {
      if (items.length === 0) throw new Error("random.pick was given no items: pass at least one to pick from")
      // next() < 1, so the index is below items.length
      return items[Math.floor(next() * items.length)]!
    },
    bool: (p = 0.5) => next() < p,
  }
}
