/**
 * gyre's own Node platform (Node 20.18 and later): running a program as the process's
 * main, the services `effect/cli` needs, an `HttpClient` on undici 7 and an `HttpServer`
 * on `node:http`.
 *
 * @since 0.1.0
 */

/** `FileSystem` on `node:fs`. @since 0.1.0 */
export * as FileSystem from "./FileSystem.ts"
/** `HttpClient` on undici 7. @since 0.1.0 */
export * as HttpClient from "./HttpClient.ts"
/** `HttpServer` on `node:http`. @since 0.1.0 */
export * as HttpServer from "./HttpServer.ts"
/** `Path` on `node:path`. @since 0.1.0 */
export * as Path from "./Path.ts"
/** `runMain`: a program as the Node process's main. @since 0.1.0 */
export { runMain } from "./Runtime.ts"
/** The services of a command-line program. @since 0.1.0 */
export * as Services from "./Services.ts"
/** `Stdio` on the Node process. @since 0.1.0 */
export * as Stdio from "./Stdio.ts"
/** `Terminal` on stdin and stdout. @since 0.1.0 */
export * as Terminal from "./Terminal.ts"
