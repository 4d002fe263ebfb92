/**
 * Length rewards.
 */
import { Reward } from "gyre"

/** 1 when the completion has at most `max` characters, else 0. */
export const maxLength = <P>(max: number, name = "brief") =>
  Reward.make<P>(name, (r) => (r.completion.length <= max ? 1 : 0))
