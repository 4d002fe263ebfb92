/**
 * A small seeded pseudo-random generator (SplitMix32 seeding a xoshiro128**
 * stream) so that initialisation, sampling and data generation are reproducible.
 *
 * @since 0.1.0
 */

/** @since 0.1.0 @category models */
export class Rng {
  private s0: number
  private s1: number
  private s2: number
  private s3: number
  private spare: number | undefined = undefined

  constructor(seed: number) {
    let x = (Math.floor(seed) ^ 0x9e3779b9) >>> 0
    const next = () => {
      x = (x + 0x9e3779b9) >>> 0
      let z = x
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0
      return (z ^ (z >>> 16)) >>> 0
    }
    this.s0 = next()
    this.s1 = next()
    this.s2 = next()
    this.s3 = next()
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1
  }

  /** a uniform 32-bit unsigned integer */
  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5) >>> 0, 7), 9) >>> 0
    const t = (this.s1 << 9) >>> 0
    this.s2 ^= this.s0
    this.s3 ^= this.s1
    this.s1 ^= this.s2
    this.s0 ^= this.s3
    this.s2 ^= t
    this.s3 = rotl(this.s3, 11)
    this.s0 >>>= 0
    this.s1 >>>= 0
    this.s2 >>>= 0
    this.s3 >>>= 0
    return result
  }

  /** a uniform float in [0, 1) with 53 random bits */
  next(): number {
    const hi = this.nextU32() >>> 5
    const lo = this.nextU32() >>> 6
    return (hi * 67108864 + lo) / 9007199254740992
  }

  /** a uniform integer in [0, n) */
  int(n: number): number {
    return Math.floor(this.next() * n)
  }

  /** a standard normal draw (Box-Muller) */
  normal(): number {
    if (this.spare !== undefined) {
      const s = this.spare
      this.spare = undefined
      return s
    }
    let u = 0
    while (u === 0) u = this.next()
    const v = this.next()
    const r = Math.sqrt(-2 * Math.log(u))
    this.spare = r * Math.sin(2 * Math.PI * v)
    return r * Math.cos(2 * Math.PI * v)
  }

  /** a fresh seed for a child stream */
  fork(): number {
    return this.nextU32()
  }
}

const rotl = (x: number, k: number) => ((x << k) | (x >>> (32 - k))) >>> 0
