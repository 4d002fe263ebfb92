/**
 * Effect's `Path` service on `node:path` and `node:url`.
 *
 * @since 0.1.0
 */
import * as NodePath from "node:path"
import * as NodeUrl from "node:url"
import { Effect, Layer, Path, PlatformError } from "effect"

/** The service. @since 0.1.0 @category constructors */
export const make = (): Path.Path =>
  Path.make({
    sep: NodePath.sep,
    basename: NodePath.basename,
    dirname: NodePath.dirname,
    extname: NodePath.extname,
    format: NodePath.format,
    isAbsolute: NodePath.isAbsolute,
    join: NodePath.join,
    normalize: NodePath.normalize,
    parse: NodePath.parse,
    relative: NodePath.relative,
    resolve: NodePath.resolve,
    toNamespacedPath: NodePath.toNamespacedPath,
    fromFileUrl: (url) =>
      Effect.try({ try: () => NodeUrl.fileURLToPath(url), catch: (cause) => new PlatformError.BadArgument({ module: "Path", method: "fromFileUrl", description: `${url.href} is not a file URL`, cause }) }),
    toFileUrl: (path) =>
      Effect.try({ try: () => NodeUrl.pathToFileURL(path), catch: (cause) => new PlatformError.BadArgument({ module: "Path", method: "toFileUrl", description: `${path} cannot be made a file URL`, cause }) }),
  })

/** `Path` on `node:path`. @since 0.1.0 @category layers */
export const layer: Layer.Layer<Path.Path> = Layer.sync(Path.Path, make)
