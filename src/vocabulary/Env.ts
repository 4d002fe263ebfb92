/**
 * Environments: a problem Schema, a source of problems (seeded generator or rows), a
 * prompt, a reward and sampling defaults. Environments are data, not classes.
 *
 * Problem `i` of seed `s` is always the same problem (its stable task key is
 * `<env>/<split>/<s>/<i>`). A fixed fraction of the problem space (chosen by a hash
 * of the problem itself) is held out for evaluation, so the eval set never overlaps
 * training. The eval set is made of distinct problems, drawn without replacement and
 * capped at the size of the eval split.
 *
 * The sources (seeded generators, rows, JSONL, CSV, Parquet, the Hub) live in `env/Sources.ts`
 * and `env/sources/`, the row index behind every draw in `env/RowIndex.ts`, the definition
 * and its checks in `env/Definition.ts`, task keys and splits in `env/Tasks.ts`, distinct
 * eval sets in `env/EvalSet.ts` and mixtures in `env/Mixture.ts`; this module re-exports
 * them.
 *
 * @since 0.1.0
 */
export { EnvError, isEnv, make } from "../env/Definition.ts"
export type { AnyEnv, ChatOptions, CheckServices, Env, EnvFields, EnvInput, EnvSpec, EvalSpec, RunDefaults, RunServices, ServicesNotProvided } from "../env/Definition.ts"
export { distinctTasks, evalSet, evalSetInfo } from "../env/EvalSet.ts"
export type { DistinctSet, EvalSetInfo } from "../env/EvalSet.ts"
export { isMixture, members, mixture, taskAt } from "../env/Mixture.ts"
export type { Mixture } from "../env/Mixture.ts"
export { csv, huggingface, jsonl, parquet, rows, seeded } from "../env/Sources.ts"
export type { CsvOptions, GenerateContext, HuggingFaceOptions, Source } from "../env/Sources.ts"
export { SourceError } from "../env/sources/RowTable.ts"
export type { RowTable } from "../env/sources/RowTable.ts"
export { hash32, random } from "../util/Random.ts"
export type { Random } from "../util/Random.ts"
export { problemAt, splitOf } from "../env/Tasks.ts"
export type { Split, Task } from "../env/Tasks.ts"
