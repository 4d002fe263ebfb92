/** Rewards over a one-number problem that score a constant or fail, for the Reward tests. */
import { Effect } from "effect"
import { Reward } from "gyre"

export type Row = { readonly n: number }
export const constant = (name: string, value: number) => Reward.make<Row>(name, () => value)
export const notApplicable = (name: string) => Reward.make<Row>(name, () => Effect.fail(new Reward.NotApplicable({})))
export const infraFault = (name: string) => Reward.make<Row>(name, () => Effect.fail(new Reward.InfraFault({ message: "judge down" })))
