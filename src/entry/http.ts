/**
 * gyre/http: the Tinker-protocol client (train and sample on a remote service) and
 * server (serve any `Trainer | Sampler` over HTTP). It loads no model code: the embedded
 * backend served over HTTP (`Serve`) is in `gyre/embedded`.
 *
 * @since 0.1.0
 */
/** The client's layer, constructor, options and the config it reads (base URL, API key). */
export { apiKeyConfig, baseUrlConfig, DEFAULT_BASE_URL, layer, layerNoDeps, make, type Options } from "../backends/http/index.ts"
/** The Tinker-protocol server over a `Trainer | Sampler`. */
export { Server } from "../backends/http/index.ts"
/** Downloading a checkpoint's file from a server (`Checkpoints.download(tinkerPath, { baseUrl })`, Tinker's archive route). */
export { Checkpoints } from "../backends/http/index.ts"
/** The wire schemas (snake_case JSON) of the protocol. */
export { Wire } from "../backends/http/index.ts"
/** How the client retries: which failures, how long. */
export { Retry } from "../backends/http/index.ts"
