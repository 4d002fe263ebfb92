/**
 * The script a service runs for function tests: the program, loaded afresh for each test
 * in its own globals, its function called with the test's arguments, each result written
 * as JSON with the serializer rules of the embedded sandbox (exact built-in types only),
 * and one last line that starts with a random marker, written straight to file
 * descriptor 1. The tests' expected values never leave the host: the service sends back
 * results, and they are compared here, so a program that reads this script learns
 * nothing it could not compute.
 *
 * @since 0.1.0
 */

import { serializerSource } from "./serializer.ts"

/** The script for a program, its function's name, the calls' arguments and the marker. @internal */
export const remoteScript = (source: string, entry: string, args: ReadonlyArray<ReadonlyArray<unknown>>, marker: string): string =>
  serializerSource + String.raw`
import sys as _s, os as _o, json as _j
def _gyre(source, entry, calls, marker, write=_o.write, _type=type, int_repr=int.__repr__, type_name=type.__dict__["__name__"].__get__,
          exec_=exec, compile_=compile, _str=str, _enumerate=enumerate, _callable=callable, _isinstance=isinstance):
    dump, NotJson = _json_writer()
    def report(answer):
        _s.stdout.flush()
        write(1, ("\n" + marker + _j.dumps(answer) + "\n").encode("utf-8"))
    def fault(reason, message):
        report({"ok": False, "reason": reason, "message": message})
    def failure(e, where):
        if _type(e) is RecursionError: return fault("StackOverflow", where + "overflowed its stack")
        if _type(e) is MemoryError: return fault("OutOfMemory", where + "ran out of memory")
        if _isinstance(e, SystemExit): return fault("Exited", where + "exited (sys.exit) before its tests were done")
        try: text = type_name(_type(e)) + ": " + _str(e)
        except BaseException: text = type_name(_type(e))
        return fault("Threw", where + "threw " + text[:500])
    try:
        code = compile_(source, "<program>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return fault("Threw", "does not compile: " + _str(e)[:500])
    results = []
    for i, a in _enumerate(calls):
        where = "test " + int_repr(i + 1) + ": "
        g = {"__name__": "solution", "__builtins__": __builtins__}
        try:
            exec_(code, g)
        except BaseException as e:
            return failure(e, where)
        fn = g.get(entry)
        if fn is None or not _callable(fn):
            return fault("NotAFunction", "defines no function " + entry)
        try:
            value = fn(*a)
        except BaseException as e:
            return failure(e, where)
        try:
            results.append(dump(value, set()))
        except NotJson as e:
            return fault("ResultNotSerializable", where + _str(e))
        except RecursionError:
            return fault("ResultNotSerializable", where + "returned a value nested too deeply to write as JSON")
        except ValueError as e:
            return fault("OutputLimit", where + "returned a number too long to write")
    report({"ok": True, "results": results})
_gyre(${JSON.stringify(source)}, ${JSON.stringify(entry)}, _j.loads(${JSON.stringify(JSON.stringify(args))}), ${JSON.stringify(marker)})
`
