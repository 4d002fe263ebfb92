/**
 * gyre: reinforcement learning of language models on a trainer/sampler service.
 *
 * @since 0.1.0
 */
export * as Advantage from "./Advantage.ts"
export * as Contract from "./Contract.ts"
export * as Datum from "./Datum.ts"
export * as Env from "./Env.ts"
export * as Episode from "./Episode.ts"
export * as Reward from "./Reward.ts"
export * as Tool from "./Tool.ts"
export { BackendError } from "./Contract.ts"
export { Sampler } from "./Sampler.ts"
export { Trainer } from "./Trainer.ts"
export { Tokenizer } from "./Tokenizer.ts"
export type { Message, Prompt } from "./Tokenizer.ts"
export type { Rollout, Score } from "./Reward.ts"
