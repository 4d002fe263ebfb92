/**
 * Consistent hashing of affinity keys onto sampler replicas, so that the requests of
 * one group (one key) always reach one replica and its prompt cache.
 *
 * @since 0.1.0
 */
import { HashRing, PrimaryKey } from "effect"
import { createHash } from "node:crypto"

class ReplicaNode implements PrimaryKey.PrimaryKey {
  constructor(readonly index: number) {}
  [PrimaryKey.symbol]() {
    return `replica-${this.index}`
  }
}

/** Consistent hashing of affinity keys onto `n` replicas (128 virtual points each). @since 0.1.0 @category constructors */
export const makeRouter = (n: number): ((key: string) => number) => {
  const ring = HashRing.make<ReplicaNode>()
  HashRing.addMany(ring, Array.from({ length: n }, (_, i) => new ReplicaNode(i)))
  // the ring's own string hash clusters short similar keys ("g1", "g2", ...): spread them first
  return (key) => HashRing.get(ring, createHash("sha1").update(key).digest("hex").slice(0, 16))?.index ?? 0
}
