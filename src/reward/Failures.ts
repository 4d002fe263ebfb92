/**
 * How a reward fails: the three typed failures a scorer may use, and the defect that
 * stops a run.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/** The reward does not apply to this rollout; it is left out of means. @since 0.1.0 @category errors */
export class NotApplicable extends Schema.TaggedError<NotApplicable>()("NotApplicable", {
  message: Schema.optional(Schema.String),
}) {}

/** The model's fault: scores `penalty`. @since 0.1.0 @category errors */
export class ModelFault extends Schema.TaggedError<ModelFault>()("ModelFault", {
  penalty: Schema.Finite,
  message: Schema.optional(Schema.String),
}) {}

/** Scoring infrastructure failed (a judge timed out, a sandbox crashed): retry, then mask. @since 0.1.0 @category errors */
export class InfraFault extends Schema.TaggedError<InfraFault>()("InfraFault", {
  message: Schema.String,
}) {}

/** @since 0.1.0 @category errors */
export type RewardFailure = NotApplicable | ModelFault | InfraFault

/** @since 0.1.0 @category guards */
export const isRewardFailure = (u: unknown): u is RewardFailure =>
  u instanceof NotApplicable || u instanceof ModelFault || u instanceof InfraFault

/**
 * A reward threw, returned something that is not a finite number, or broke its
 * contract: the run stops. `reward` names the component; the runner adds the env and
 * the problem.
 * @since 0.1.0 @category errors
 */
export class RewardDefect extends Schema.TaggedError<RewardDefect>()("RewardDefect", {
  reward: Schema.String,
  message: Schema.String,
  cause: Schema.optional(Schema.Defect()),
}) {}
