/**
 * Run settings named as the user wrote them: each settings field's flag (`learningRate` is
 * `--lr`), and Schema issues about settings as one line that names the flag and the value
 * given. `gyre run`'s options (`RunOptions.ts`) and `--resume`'s checks use them.
 *
 * @since 0.1.0
 */
import { SchemaIssue } from "effect"

/** Settings fields as the flags that set them, for error messages. @since 0.1.0 @category constants */
export const FLAG_OF: Record<string, string> = {
  seed: "--seed", difficulty: "--difficulty",
  steps: "--steps", groups: "--groups", groupSize: "--group-size", learningRate: "--lr", weightDecay: "--weight-decay",
  gradClipNorm: "--grad-clip", maxTokens: "--max-tokens", temperature: "--temperature", topP: "--top-p", topK: "--top-k",
  microBatch: "--micro-batch", rewardConcurrency: "--reward-concurrency", sampleConcurrency: "--sample-concurrency",
  evalEvery: "--eval-every", evalSize: "--eval-size", evalTemperature: "--eval-temperature", saveEvery: "--save-every",
  maxLag: "--max-lag", maxStepsOffPolicy: "--max-steps-off-policy", streamMinibatches: "--stream-minibatches", optimEvery: "--optim-every", maxMasked: "--max-masked", logRolloutsEvery: "--log-rollouts-every", hackWatchEvery: "--hack-watch-every", lossConfig: "--loss-config",
  warmupSteps: "--warmup-steps", minLr: "--min-lr", klCoef: "--kl-coef", klLossCoef: "--kl-loss-coef", dynamicSampling: "--dynamic-sampling", initFrom: "--init-from",
  recipe: "--recipe", fraction: "--overlong-buffer", coef: "--teacher-coef", beta: "--dpo-beta",
}

/** Nested settings paths whose last segment is ambiguous. */
const FLAG_OF_PATH: Record<string, string> = {
  "lrSchedule.kind": "--lr-schedule",
  "lossAggregation.kind": "--loss-aggregation",
  "lossAggregation.constant": "--loss-constant",
  "lossAggregation.denominator": "--loss-denominator",
  "dynamicSampling.maxRounds": "--dynamic-sampling",
}

/** The flag that sets a settings path, e.g. `["adam", "learningRate"]` -> `--lr`. @since 0.1.0 @category utils */
export const flagOf = (path: ReadonlyArray<string>): string | undefined => {
  if (path[0] === "lossConfig" && path.length > 1) return `--loss-config ${path.slice(1).join(".")}`
  const nested = FLAG_OF_PATH[path.join(".")]
  if (nested !== undefined) return nested
  const last = path[path.length - 1]
  return last !== undefined ? FLAG_OF[last] : undefined
}

/**
 * Schema issues as one line each that names what was given: `--lr must be a value greater
 * than or equal to 0, got -1`. `name` maps a settings path to what the user wrote (a
 * flag, or a config.json field); paths it does not know are named `settings field a.b`.
 * @since 0.1.0 @category utils
 */
export const describeIssues = (
  issue: SchemaIssue.Issue,
  value: unknown,
  name: (path: ReadonlyArray<string>) => string | undefined,
): string =>
  SchemaIssue.makeFormatterStandardSchemaV1()(issue).issues.map((i) => {
    const path = (i.path ?? []).map((k) => String(typeof k === "object" && k !== null ? k.key : k))
    const given = path.reduce<unknown>((v, k) => (typeof v === "object" && v !== null ? (v as Record<string, unknown>)[k] : undefined), value)
    const who = name(path) ?? (path.length > 0 ? `settings field ${path.join(".")}` : "settings")
    const what = i.message.startsWith("Expected ") ? `must be ${i.message.slice("Expected ".length)}` : `: ${i.message}`
    const got = given !== undefined && !/, got /.test(what) ? `, got ${typeof given === "number" ? String(given) : JSON.stringify(given)}` : ""
    return `${who} ${what}${got}`.replace(/ :/, ":")
  }).join("; ")
