/**
 * Named recipes (`--recipe`): the settings each published method trains with, as gyre's
 * flags, so a run of "DAPO" is reproducible and says what it was. A recipe's settings
 * sit over gyre's defaults and the env's suggestions; flags given with it override them.
 * `config.json` records the recipe and the settings in force, and `--resume` keeps them.
 *
 * Every recipe averages over the whole batch, as its paper's objective does (`1/G` over the
 * samples, or `1/sum|o_i|` over their tokens): `denominator: "batch"` counts the samples
 * whose advantage is 0 too, which gyre's default (the Loops rule) leaves out.
 *
 * | recipe | loss | clip (low, high) | advantage | aggregation | KL | other |
 * |---|---|---|---|---|---|---|
 * | grpo | ppo | 0.8, 1.2 | group_sample_std: (r - mean) / (sample std + 1e-4) | sequence_mean over the batch | k3 in the loss, beta 0.04 | |
 * | dr-grpo | ppo | 0.8, 1.2 | mean_only | constant (samples x maxTokens) | none | |
 * | dapo | ppo | 0.8, 1.28 | group_std | token_mean over the batch | none | dynamic sampling (3 rounds), overlong shaping (last 20% of maxTokens) |
 * | gspo | gspo | 1 - 3e-4, 1 + 4e-4 | group_std | sequence_mean over the batch | none | |
 * | cispo | cispo | 0, 4 | group_std | token_mean over the batch | none | |
 *
 * @since 0.1.0
 */
import type { RecipeName, RunSettings } from "./Settings.ts"

/** What a recipe sets and where its settings come from. @since 0.1.0 @category models */
export interface Recipe {
  /** the paper, and the settings of it that the recipe takes */
  readonly source: string
  readonly settings: Partial<RunSettings>
}

/** @since 0.1.0 @category constants */
export const RECIPES: Record<RecipeName, Recipe> = {
  grpo: {
    source:
      "Shao et al. 2024, DeepSeekMath (GRPO): clip epsilon 0.2; each sample's token losses averaged, then the G samples of the batch (1/G, every sample counts); " +
      "the KL to the reference as beta·(pi_ref/pi - log(pi_ref/pi) - 1) per token in the loss, beta 0.04; advantages (r - mean) / std, with the std as TRL's GRPOTrainer computes it (torch.std, Bessel-corrected, plus 1e-4)",
    settings: {
      loss: "ppo",
      lossConfig: { clip_low_threshold: 0.8, clip_high_threshold: 1.2 },
      advantage: "group_sample_std",
      lossAggregation: { kind: "sequence_mean", denominator: "batch" },
      klCoef: 0,
      klLossCoef: 0.04,
    },
  },
  "dr-grpo": {
    source: "Liu et al. 2025, Understanding R1-Zero-Like Training (Dr. GRPO): no std normalization of advantages, token losses summed over a constant budget (no length normalization), no KL",
    settings: { loss: "ppo", lossConfig: { clip_low_threshold: 0.8, clip_high_threshold: 1.2 }, advantage: "mean_only", lossAggregation: { kind: "constant" }, klCoef: 0, klLossCoef: 0 },
  },
  dapo: {
    source: "Yu et al. 2025, DAPO: clip-higher (epsilon_low 0.2, epsilon_high 0.28), token-level loss over every token of the batch (1/sum|o_i|), dynamic sampling, overlong reward shaping (a 4,096-token buffer of 20,480: the last 20%), no KL",
    settings: {
      loss: "ppo",
      lossConfig: { clip_low_threshold: 0.8, clip_high_threshold: 1.28 },
      advantage: "group_std",
      lossAggregation: { kind: "token_mean", denominator: "batch" },
      dynamicSampling: { maxRounds: 3 },
      overlong: { fraction: 0.2 },
      klCoef: 0,
      klLossCoef: 0,
    },
  },
  gspo: {
    source: "Zheng et al. 2025, Group Sequence Policy Optimization: the sequence ratio clipped to (1 - 3e-4, 1 + 4e-4), averaged over the G sequences of the batch (1/G), no KL",
    settings: { loss: "gspo", lossConfig: {}, advantage: "group_std", lossAggregation: { kind: "sequence_mean", denominator: "batch" }, klCoef: 0, klLossCoef: 0 },
  },
  cispo: {
    source: "MiniMax 2025, MiniMax-M1 (CISPO): the detached importance weight clipped with no lower bound, token-level loss over every token of the batch (1/sum|o_i|), no KL; the upper bound 4 is Tinker's documented default (the paper tunes it and publishes none)",
    settings: { loss: "cispo", lossConfig: {}, advantage: "group_std", lossAggregation: { kind: "token_mean", denominator: "batch" }, klCoef: 0, klLossCoef: 0 },
  },
}

/** The settings a recipe sets, as the flags that would set them. @since 0.1.0 @category combinators */
export const recipeFlags = (name: RecipeName): string => {
  const s = RECIPES[name].settings
  // --loss-config takes one key=value each time it is given
  const config = Object.entries(s.lossConfig ?? {}).map(([k, v]) => `--loss-config ${k}=${v}`).join(" ")
  return [
    `--loss ${s.loss}`,
    config,
    `--advantage ${s.advantage}`,
    `--loss-aggregation ${s.lossAggregation?.kind}`,
    s.lossAggregation?.denominator !== undefined ? `--loss-denominator ${s.lossAggregation.denominator}` : "",
    s.dynamicSampling !== undefined ? `--dynamic-sampling ${s.dynamicSampling.maxRounds}` : "",
    s.overlong !== undefined ? `--overlong-buffer ${s.overlong.fraction}` : "",
    `--kl-coef ${s.klCoef ?? 0}`,
    `--kl-loss-coef ${s.klLossCoef ?? 0}`,
  ].filter((f) => f !== "").join(" ")
}
