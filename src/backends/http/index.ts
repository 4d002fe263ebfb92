/**
 * The HTTP backend: a `Trainer | Sampler` over the Tinker wire protocol, and the
 * server that exposes any backend on it.
 *
 * ```ts
 * import * as Http from "./src/backends/http/index.ts"
 * const backend = Http.layer({ baseUrl: "http://127.0.0.1:8080" }) // Layer<Trainer | Sampler>
 * ```
 *
 * @since 0.1.0
 */
export * as Alignment from "./wire/Alignment.ts"
export * as Checkpoints from "./client/ClientCheckpoints.ts"
export { apiKeyConfig, baseUrlConfig, DEFAULT_BASE_URL, layer, layerNoDeps, make, type Options } from "./client/Client.ts"
export * as Retry from "./client/Retry.ts"
export * as Server from "./server/Server.ts"
export * as Wire from "./wire/Wire.ts"
