/**
 * Request fields and routes of Tinker SDKs newer than the one this server follows
 * (0.25), and what `serve` does with each: nothing a client asks for is dropped without
 * a word. Request bodies are decoded strictly (`decodeRequestOr400`): a field the route
 * does not know is a 400 naming it. A newer field this server cannot honour is accepted
 * only with a value that asks for nothing (null, 0, false, an empty list), which is what
 * a newer SDK sends when its user did not ask for the feature; any other value is a 400
 * naming the field and saying why. A newer route is a 404 that says what to use instead.
 *
 * Sources: newer source files of the public `thinking-machines-lab/tinker` repository (up
 * to 0.32.0: `types/`, `lib/public_interfaces/sampling_client.py`), and servers that
 * track them. `sessions/{id}/finish` is served (acknowledged, in `TrainingRoutes.ts`);
 * the `asample` promise carries `sample_sequence_ids`, which 0.32 requires.
 *
 * @since 0.1.0
 */

/** Newer request fields, by route, with why a value that asks for something is refused. @since 0.1.0 @category constants */
export const FIELDS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  asample: {
    topk_sample_logprobs: "top-k log-probs of sampled tokens are not served here: the sampler returns each sampled token's own log-prob (send 0)",
    target_prompt_logprobs: "log-probs of target prompt tokens are not served here; use prompt_logprobs: true, which scores every prompt token",
    prompt_logprobs_last_n: "prompt log-probs of the last n tokens only are not served here; use prompt_logprobs: true (every prompt token)",
    prompt_alt_tokens_k: "alternative prompt tokens are not served here (send 0)",
    record_stability_info: "numerical stability records are not kept by the embedded sampler (send false)",
  },
  create_model: {
    optimizer_config: "this server trains with Adam only: optimizer_config {type: \"adamw\"} is what it does; Dimuon and other optimizers are not implemented",
  },
  load_weights: {
    optimizer_config: "this server trains with Adam only: optimizer_config {type: \"adamw\"} is what it does; Dimuon and other optimizers are not implemented",
    weights_access_token: "loading weights from another account's storage is not served here: load a tinker:// path of this server",
  },
}

/** Newer routes, with what to use instead. @since 0.1.0 @category constants */
export const ROUTES: Readonly<Record<string, string>> = {
  cancel_future: "cancel_future is not served here: a future runs to its end; its result is kept until retrieved",
  copy_weights: "copy_weights is not served here: save_weights then load_weights copies a model's weights",
  save_weights_external: "save_weights_external is not served here: save_weights writes under the server's --state-dir and the archive route hands the files out",
}

/** Whether a value asks for nothing beyond what this server does (Adam is `{type: "adamw"}`). @since 0.1.0 @category predicates */
export const asksForNothing = (v: unknown): boolean =>
  (typeof v === "object" && v !== null && !Array.isArray(v) && (v as { type?: unknown }).type === "adamw" && Object.keys(v).length === 1) ||
  v === null || v === undefined || v === false || v === 0 || (Array.isArray(v) && v.length === 0) || (typeof v === "object" && v !== null && Object.keys(v).length === 0)

/**
 * The 400 message for the first newer field of `body` on `route` that asks for something,
 * and `body` without the newer fields that ask for nothing.
 * @since 0.1.0 @category combinators
 */
export const screen = (route: string, body: unknown): { readonly refused?: string; readonly body: unknown } => {
  const fields = FIELDS[route]
  if (fields === undefined || typeof body !== "object" || body === null || Array.isArray(body)) return { body }
  const rest: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(body)) {
    const why = Object.hasOwn(fields, k) ? fields[k] : undefined
    if (why === undefined) rest[k] = v
    else if (!asksForNothing(v)) return { refused: `${k}: ${why}`, body }
  }
  return { body: rest }
}
