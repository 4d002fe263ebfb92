/**
 * Effect's `FileSystem` service on `node:fs/promises`: whole-file reads and writes,
 * directories, metadata, links, temporary files and folders. Open file handles
 * (`open`, and `stream` / `sink`, which use them) and `watch` are not provided: they
 * fail with a `BadArgument` that says so. gyre reads and writes files through this
 * service (`current`: the one in context, else this one), except where a sync caller, a
 * ranged read or an fsync needs `node:fs` itself (each such place says why), and the
 * embedded backend's checkpoint files, read and written by its engines.
 *
 * @since 0.1.0
 */
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { Effect, FileSystem, Layer, Option, PlatformError, Stream } from "effect"
import * as ByteSize from "effect/ByteSize"

const tagOf = (code: unknown): PlatformError.SystemErrorTag => {
  switch (code) {
    case "ENOENT":
      return "NotFound"
    case "EACCES":
    case "EPERM":
      return "PermissionDenied"
    case "EEXIST":
      return "AlreadyExists"
    case "EISDIR":
    case "ENOTDIR":
    case "EBADF":
      return "BadResource"
    case "EBUSY":
      return "Busy"
    case "ETIMEDOUT":
      return "TimedOut"
    default:
      return "Unknown"
  }
}

const systemError = (method: string, path: string, cause: unknown) => {
  const e = cause as { code?: unknown; syscall?: unknown; message?: unknown }
  return PlatformError.systemError({
    _tag: tagOf(e?.code),
    module: "FileSystem",
    method,
    pathOrDescriptor: path,
    ...(typeof e?.syscall === "string" ? { syscall: e.syscall } : {}),
    ...(typeof e?.message === "string" ? { description: e.message } : {}),
    cause,
  })
}

/** One `node:fs/promises` call as an Effect that fails with a `PlatformError` naming the method and path. */
const call = <A>(method: string, path: string, f: () => Promise<A>) => Effect.tryPromise({ try: f, catch: (cause) => systemError(method, path, cause) })

const unsupported = (method: string) =>
  PlatformError.badArgument({ module: "FileSystem", method, description: `${method} is not supported by gyre's Node platform (whole-file operations are)` })

const typeOf = (s: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean; isBlockDevice(): boolean; isCharacterDevice(): boolean; isFIFO(): boolean; isSocket(): boolean }): FileSystem.File.Type =>
  s.isFile()
    ? "File"
    : s.isDirectory()
      ? "Directory"
      : s.isSymbolicLink()
        ? "SymbolicLink"
        : s.isBlockDevice()
          ? "BlockDevice"
          : s.isCharacterDevice()
            ? "CharacterDevice"
            : s.isFIFO()
              ? "FIFO"
              : s.isSocket()
                ? "Socket"
                : "Unknown"

const info = (s: import("node:fs").BigIntStats): FileSystem.File.Info => ({
  type: typeOf(s),
  mtime: Option.some(s.mtime),
  atime: Option.some(s.atime),
  birthtime: Option.some(s.birthtime),
  dev: s.dev,
  ino: Option.some(s.ino),
  mode: Number(s.mode),
  nlink: Option.some(s.nlink),
  uid: Option.some(Number(s.uid)),
  gid: Option.some(Number(s.gid)),
  rdev: Option.some(s.rdev),
  size: ByteSize.bytes(s.size),
  blksize: Option.some(ByteSize.bytes(s.blksize)),
  blocks: Option.some(s.blocks),
})

const tempDirectory = (options?: { readonly directory?: string | undefined; readonly prefix?: string | undefined }) =>
  call("makeTempDirectory", options?.directory ?? Os.tmpdir(), () => Fs.mkdtemp(NodePath.join(options?.directory ?? Os.tmpdir(), options?.prefix ?? "")))

const tempFile = (options?: { readonly directory?: string | undefined; readonly prefix?: string | undefined; readonly suffix?: string | undefined }) =>
  Effect.flatMap(tempDirectory(options), (dir) => {
    const file = NodePath.join(dir, `${options?.prefix ?? ""}file${options?.suffix ?? ""}`)
    return Effect.as(call("makeTempFile", file, () => Fs.writeFile(file, new Uint8Array(0))), file)
  })

const removeQuietly = (path: string) => Effect.promise(() => Fs.rm(path, { recursive: true, force: true }))

/** The service. @since 0.1.0 @category constructors */
export const make = (): FileSystem.FileSystem =>
  FileSystem.make({
    access: (path, options) => {
      const mode = (options?.readable ? Fs.constants.R_OK : 0) | (options?.writable ? Fs.constants.W_OK : 0) || Fs.constants.F_OK
      return call("access", path, () => Fs.access(path, mode))
    },
    copy: (from, to, options) => call("copy", from, () => Fs.cp(from, to, { recursive: true, force: options?.overwrite ?? false, errorOnExist: !(options?.overwrite ?? false), preserveTimestamps: options?.preserveTimestamps ?? false })),
    copyFile: (from, to) => call("copyFile", from, () => Fs.copyFile(from, to)),
    chmod: (path, mode) => call("chmod", path, () => Fs.chmod(path, mode)),
    chown: (path, uid, gid) => call("chown", path, () => Fs.chown(path, uid, gid)),
    link: (from, to) => call("link", from, () => Fs.link(from, to)),
    lstat: (path) => Effect.map(call("lstat", path, () => Fs.lstat(path, { bigint: true })), info),
    stat: (path) => Effect.map(call("stat", path, () => Fs.stat(path, { bigint: true })), info),
    makeDirectory: (path, options) => call("makeDirectory", path, () => Fs.mkdir(path, { recursive: options?.recursive ?? false, ...(options?.mode !== undefined ? { mode: options.mode } : {}) })).pipe(Effect.asVoid),
    makeTempDirectory: tempDirectory,
    makeTempDirectoryScoped: (options) => Effect.acquireRelease(tempDirectory(options), removeQuietly),
    makeTempFile: tempFile,
    makeTempFileScoped: (options) => Effect.acquireRelease(tempFile(options), (file) => removeQuietly(NodePath.dirname(file))),
    open: () => Effect.fail(unsupported("open")),
    readDirectory: (path, options) => call("readDirectory", path, () => Fs.readdir(path, { recursive: options?.recursive ?? false })),
    readDirectoryEntries: (path) =>
      Effect.map(call("readDirectoryEntries", path, () => Fs.readdir(path, { withFileTypes: true })), (entries) => entries.map((e) => ({ name: e.name, type: typeOf(e) }))),
    readFile: (path) => Effect.map(call("readFile", path, () => Fs.readFile(path)), (b) => new Uint8Array(b.buffer, b.byteOffset, b.byteLength)),
    readLink: (path) => call("readLink", path, () => Fs.readlink(path)),
    realPath: (path) => call("realPath", path, () => Fs.realpath(path)),
    remove: (path, options) => call("remove", path, () => Fs.rm(path, { recursive: options?.recursive ?? false, force: options?.force ?? false })),
    rename: (from, to) => call("rename", from, () => Fs.rename(from, to)),
    symlink: (from, to) => call("symlink", from, () => Fs.symlink(from, to)),
    truncate: (path, length) => call("truncate", path, () => Fs.truncate(path, length)),
    utimes: (path, atime, mtime) => call("utimes", path, () => Fs.utimes(path, atime, mtime)),
    watch: () => Stream.fail(unsupported("watch")),
    writeFile: (path, data, options) =>
      call("writeFile", path, () => Fs.writeFile(path, data, { ...(options?.flag !== undefined ? { flag: options.flag } : {}), ...(options?.mode !== undefined ? { mode: options.mode } : {}) })),
  })

/** `FileSystem` on `node:fs`. @since 0.1.0 @category layers */
export const layer: Layer.Layer<FileSystem.FileSystem> = Layer.sync(FileSystem.FileSystem, make)

let own: FileSystem.FileSystem | undefined

/**
 * The `FileSystem` in context, else this platform's: gyre's file access goes through the
 * service, and a program (or a test) that provides its own is read and written through
 * it, while one that provides none needs no layer.
 * @since 0.1.0 @category accessors
 */
export const current: Effect.Effect<FileSystem.FileSystem> = Effect.map(Effect.serviceOption(FileSystem.FileSystem), Option.getOrElse(() => (own ??= make())))

/**
 * Whether `path` exists, through `current`. A path that cannot be checked (a file on the
 * way, no permission) counts as absent, as `existsSync` has it.
 * @since 0.1.0 @category accessors
 */
export const exists = (path: string): Effect.Effect<boolean> => Effect.flatMap(current, (fs) => fs.exists(path)).pipe(Effect.orElseSucceed(() => false))

/**
 * A `PlatformError`'s own text: the system's message (`ENOENT: no such file or directory,
 * open '…'`), else Effect's.
 * @since 0.1.0 @category utils
 */
export const messageOf = (e: PlatformError.PlatformError): string =>
  e.reason.cause instanceof Error ? e.reason.cause.message : e.reason._tag === "BadArgument" ? e.message : (e.reason.description ?? e.message)

const utf8 = new TextDecoder("utf-8", { ignoreBOM: true })

/**
 * The text of a file, through `current`, decoded as `readFile(path, "utf8")` decodes it: a
 * leading byte-order mark is kept (`readFileString` drops it).
 * @since 0.1.0 @category accessors
 */
export const readText = (path: string): Effect.Effect<string, PlatformError.PlatformError> =>
  Effect.flatMap(current, (fs) => fs.readFile(path)).pipe(Effect.map((bytes) => utf8.decode(bytes)))
