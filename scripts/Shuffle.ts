/** The seeded shuffle the pretraining scripts fix their validation sets with. */
import { Rng } from "../src/backends/local/Rng.ts"

/** A seeded Fisher-Yates shuffle. */
export const shuffled = <A>(items: ReadonlyArray<A>, seed: number): Array<A> => {
  const out = items.slice()
  const rng = new Rng(seed)
  for (let i = out.length - 1; i > 0; i--) {
    const j = rng.nextU32() % (i + 1)
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}
