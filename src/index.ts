/**
 * gyre: reinforcement learning of language models on a trainer/sampler service.
 *
 * @since 0.1.0
 */
/** Agent envs: an async function (AI SDK, openai, any OpenAI-compatible client) played against the run's endpoint. */
export * as Agent from "./vocabulary/Agent.ts"
/** Game envs: several roles, each played by the policy (self-play) or a scripted player. */
export * as Game from "./vocabulary/Game.ts"
/** Advantage normalization: group std with a zero-std guard, mean only, batch std, none. */
export * as Advantage from "./vocabulary/Advantage.ts"
/** The wire contract's Schemas: ModelInput, TensorData, Datum, SamplingParams, AdamParams, results. */
export * as Contract from "./contract/Contract.ts"
/** Losses written as a loss and its gradient over log-probs, trained through a linear surrogate. */
export * as CustomLoss from "./vocabulary/CustomLoss.ts"
/** Rollouts and episodes to Datums (the Loops layout), and the one Datum validator. */
export * as Datum from "./vocabulary/Datum.ts"
/** Where a batch of Datums is wrong, as data (datum, field, position, value, expected), and its one rendering as text. */
export * as DatumIssue from "./contract/DatumIssue.ts"
/** Environments: problems, sources, prompts, rewards, held-out splits, mixtures, services. */
export * as Env from "./vocabulary/Env.ts"
/** Multi-turn episodes: state, a step from the model's turn to an observation or the end, limits. */
export * as Episode from "./env/Episode.ts"
/** Rewards: leaves, combinators, typed failures (not applicable, model fault, infra fault). */
export * as Reward from "./vocabulary/Reward.ts"
/** Tools: a name, an argument Schema and a handler; call syntaxes; tool episodes. */
export * as Tool from "./vocabulary/Tool.ts"
/** The one failure type of trainer and sampler services. */
export { BackendError } from "./contract/Contract.ts"
/** The Sampler service: samples from the latest published policy version. */
export { Sampler } from "./services/Sampler.ts"
/** The Trainer service: forward_backward, forward, optim_step, publish, save and load state. */
export { Trainer } from "./services/Trainer.ts"
/** The Tokenizer service a backend provides (text <-> tokens, chat prompts). */
export { Tokenizer } from "./services/Tokenizer.ts"
/** A chat message, and a prompt as text or messages. */
export type { Message, Prompt } from "./services/Tokenizer.ts"
/** What a reward scores (a rollout), and what it returns (a score with its components). */
export type { Rollout, Score } from "./vocabulary/Reward.ts"
