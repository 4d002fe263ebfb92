/**
 * Schemas of the Tinker wire protocol (JSON bodies, snake_case), as the Python SDK
 * speaks it: request bodies, future states and results. Both the client and the
 * server decode every body they receive with these.
 *
 * Extensions (ignored by the Python SDK, which drops unknown fields):
 * - `policy_version` on the results of `optim_step`, `save_weights_for_sampler`,
 *   `asample`, `get_info` and `GET samplers/{id}`: the number of optimizer steps behind
 *   the weights (the Loops `SampleResult.policy_version`);
 * - request header `X-Min-Policy-Version` on `asample` (as Loops sends it): the
 *   sampler waits until it serves at least that version;
 * - request header `X-Affinity-Key` on `asample`: requests with one key go to one
 *   sampler replica;
 * - `top_k_logprobs` in `forward_backward_input` / `forward_input`, answered with the
 *   `topk_*` tensors of `loss_fn_outputs`;
 * - `reason` on a failed future: the `BackendError` reason, so it survives the trip;
 * - `issue` on a 400 or a failed future that refuses a datum: the `DatumIssue` (datum,
 *   field, position, value and what was expected, in gyre's names and positions), so a
 *   gyre client knows which datum without reading the text of `detail`;
 * - request header `X-Gyre-Wait-Ms` on a submission: the server may hold the answer
 *   up to that long and put the future's outcome in it (`result`), sparing the poll.
 *
 * The Schemas live by kind: `WireData.ts` (values), `WireRequests.ts` (request bodies and headers),
 * `WireResponses.ts` (futures, errors, results), `WireMetrics.ts` (metric keys); this
 * module gathers them under one name, `Wire`, with the route prefix and the request types.
 *
 * @since 0.1.0
 */

/** Every endpoint lives under this prefix. @since 0.1.0 @category constants */
export const API_PREFIX = "/api/v1"

/** Request types named in `X-Tinker-Request-Type`. @since 0.1.0 @category models */
export type RequestType =
  | "CreateModel"
  | "UnloadModel"
  | "ForwardBackward"
  | "Forward"
  | "OptimStep"
  | "SaveWeights"
  | "SaveWeightsForSampler"
  | "LoadWeights"
  | "Sample"

export * from "./WireData.ts"
export * from "./WireRequests.ts"
export * from "./WireResponses.ts"
export { Metrics, MetricValue } from "./WireMetrics.ts"
export {
  METRIC_KEYS,
  METRIC_REDUCTIONS,
  metricFromWire,
  metricKeyFromWire,
  metricKeyToWire,
  metricsFromWire,
  metricsToWire,
  metricToWire,
} from "./WireMetrics.ts"
