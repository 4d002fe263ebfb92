/**
 * The inventory the MCP server in `inventory-server.ts` serves: items, and a stock count and
 * a price for each. Deterministic, so the env's reward knows the answers the server gives.
 */

/** The items the shop carries: short words, so a call fits the embedded model's context. */
export const ITEMS = [
  "pen", "cup", "hat", "box", "key", "map", "bag", "mug", "jar", "fan", "lamp", "sock", "bell", "drum",
  "kite", "rope", "nail", "comb", "soap", "vase", "bowl", "fork", "ring", "coin", "tape", "fish", "desk",
  "sofa", "bed", "rug", "pot", "pan", "lid", "saw", "axe", "hoe", "net", "oar", "van", "car",
] as const

/** A fixed number in [lo, hi] for a name: FNV-1a, so the numbers never change between runs or machines. */
const hashed = (name: string, lo: number, hi: number): number => {
  let h = 0x811c9dc5
  for (const ch of name) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193) >>> 0
  return lo + (h % (hi - lo + 1))
}

export const stockOf = (item: string): number => hashed(`stock:${item}`, 0, 99)
export const priceOf = (item: string): number => hashed(`price:${item}`, 1, 99)
