/**
 * The Python side of the embedded sandbox: run once in each worker's interpreter after
 * Pyodide loads, it defines the functions the worker calls for every evaluation.
 *
 * - the work budget: `sys.monitoring` (PEP 669) counts every jump and every start of a
 *   Python function, as QuickJS counts jumps back and calls, and 100 for each exception
 *   raised; past the budget, or when
 *   the host asked it to stop (output cap, memory cap), each event raises `_Stop`, which
 *   no `except` can hold for long: the next jump raises again. `sys.monitoring` is then
 *   removed from `sys`, so a program cannot switch the count off through it;
 * - a fresh state per evaluation (`reset`): modules imported since the baseline are
 *   dropped, every baseline module's namespace and `builtins` are put back as they were,
 *   `sys.path`, `sys.meta_path`, the recursion limit, the environment and the working
 *   directory are restored; each test gets a fresh globals dict;
 * - refused imports: the bridges to the host (`js`, `pyodide`, `_pyodide*`, `pyodide_js`),
 *   `ctypes`, `gc` and `micropip` are taken out of `sys.modules` and refused by an import
 *   hook; `os.system` and its kin are removed;
 * - results are written as JSON by a serializer built from the interpreter's own C
 *   functions captured before any program runs: exact `None`, `bool`, `int`, `float`
 *   (finite), `str`, `list`, `tuple`, `dict` (keys `str`, `int`, `float`, `bool`, `None`),
 *   `set` and `frozenset` (sorted); anything else (an object whose `__eq__` is always
 *   true, a subclass) has no JSON value. Results are compared on the host, never here.
 *
 * @since 0.1.0
 */
import { serializerSource } from "./serializer.ts"


/** The harness (Python source). It defines `H_begin`, `H_flag`, `H_reset`, `H_calls`, `H_stdio`, `H_work`. @internal */
export const harnessSource = serializerSource + String.raw`
import sys, builtins, os, posix, io
from functools import partial

def _budget():
    """The work count: (begin, on, off, stop reason, flag, work spent)."""
    M = sys.monitoring
    TOOL = 5
    M.use_tool_id(TOOL, "gyre-budget")
    EVENTS = M.events.JUMP | M.events.PY_START | M.events.RAISE
    RAISE_WORK = 100
    set_events = M.set_events
    # state: [work spent, budget, stop reason or None]; FLAG[0] is set by the host (1: output cap, 2: memory cap)
    st = [0, 0, None]
    FLAG = bytearray(1)
    FLAGGED = (None, "OutputLimit", "OutOfMemory")

    class _Stop(BaseException):
        pass

    def tick(code, offset, dest=None):
        st[0] += 1
        if st[2] is not None:
            raise _Stop()
        if FLAG[0]:
            st[2] = FLAGGED[FLAG[0]]
            raise _Stop()
        if st[0] > st[1]:
            st[2] = "Timeout"
            raise _Stop()

    def raised(code, offset, exc):
        # an exception costs RAISE_WORK: a program that recovers from RecursionError by
        # recursing again does little counted work per exception, and would otherwise run
        # for minutes within its budget
        st[0] += RAISE_WORK
        tick(code, offset)

    M.register_callback(TOOL, M.events.JUMP, tick)
    M.register_callback(TOOL, M.events.PY_START, tick)
    M.register_callback(TOOL, M.events.RAISE, raised)

    def begin(budget):
        st[0], st[1], st[2] = 0, budget, None
        FLAG[0] = 0

    # on and off are C callables (partials of set_events): calling them starts no Python function, so no event
    return begin, partial(set_events, TOOL, EVENTS), partial(set_events, TOOL, 0), lambda: st[2], FLAG, lambda: st[0]

def _refuse():
    """Takes the bridges to the host out of reach; returns the hidden modules."""
    BLOCKED = ("js", "pyodide", "pyodide_js", "_pyodide", "_pyodide_core", "ctypes", "_ctypes", "gc", "micropip", "_testcapi", "_testinternalcapi", "pyodide_http")
    def blocked(name):
        top = name.split(".")[0]
        return top in BLOCKED or top.startswith("_pyodide")

    class Refuse:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if blocked(name):
                raise ImportError("import of " + name + " is not allowed in the sandbox", name=name)
            return None
        @staticmethod
        def invalidate_caches():
            pass

    hidden = {}
    for name in list(sys.modules):
        if blocked(name):
            hidden[name] = sys.modules.pop(name)
    sys.meta_path.insert(0, Refuse)
    for mod in (os, posix):
        for fn in ("system", "popen", "fork", "forkpty", "execv", "execve", "spawnv", "spawnve", "posix_spawn", "posix_spawnp", "kill", "killpg", "_exit"):
            if fn in mod.__dict__:
                del mod.__dict__[fn]
    del sys.monitoring
    return hidden

def _baseline(hidden, off):
    """The state every evaluation starts from: (reset, the current stdout)."""
    modules = sys.modules
    HOME = os.getcwd()
    base_modules = dict(modules)
    snapshots = [(m.__dict__, dict(m.__dict__)) for m in base_modules.values() if type(getattr(m, "__dict__", None)) is dict]
    lists = [(sys.path, list(sys.path)), (sys.meta_path, list(sys.meta_path)), (sys.path_hooks, list(sys.path_hooks))]
    environ, environ_obj = dict(os.environ), os.environ
    limit, digits = sys.getrecursionlimit(), sys.get_int_max_str_digits()
    text_io, file_io, _list, _len, _dict = io.TextIOWrapper, io.FileIO, list, len, dict
    sys_snap = next(snap for d, snap in snapshots if d is sys.__dict__)
    setrecursionlimit, set_digits, chdir, setprofile, settrace = sys.setrecursionlimit, sys.set_int_max_str_digits, os.chdir, sys.setprofile, sys.settrace
    std = [None]

    def fresh_std():
        # new stream objects: nothing a program left in a buffer (a flood cut by the cap) reaches the next evaluation
        for fd, name in ((1, "stdout"), (2, "stderr")):
            stream = text_io(file_io(fd, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True)
            sys_snap[name] = sys_snap["__" + name + "__"] = stream
            if fd == 1:
                std[0] = stream

    def reset():
        off()
        fresh_std()
        setprofile(None)
        settrace(None)
        for name in _list(modules):
            if name not in base_modules:
                del modules[name]
        modules.update(base_modules)
        for name in hidden:
            modules.pop(name, None)
        for d, snap in snapshots:
            if d != snap or _len(d) != _len(snap):
                for k in _list(d):
                    if k not in snap:
                        del d[k]
                d.update(snap)
        for live, snap in lists:
            live[:] = snap
        if _dict(environ_obj) != environ:
            environ_obj.clear()
            environ_obj.update(environ)
        setrecursionlimit(limit)
        set_digits(digits)
        chdir(HOME)

    return reset, lambda: std[0]

def _faults(stopped):
    """(fault, failure): a fault's answer, and the fault of an exception that ended a program."""
    _type, _str, _isinstance, int_repr = type, str, isinstance, int.__repr__
    _RecursionError, _SystemExit, _BaseException = RecursionError, SystemExit, BaseException
    type_name = type.__dict__["__name__"].__get__
    limit = sys.getrecursionlimit()

    def fault(reason, message):
        return {"ok": False, "reason": reason, "message": message}

    def depth(e):
        n, tb = 0, e.__traceback__
        while tb is not None:
            n, tb = n + 1, tb.tb_next
        return n

    def failure(e, where):
        # the host's stop reason first
        if stopped() is not None:
            return fault(stopped(), where)
        if _type(e) is _RecursionError and depth(e) >= limit // 2:
            # raised by the interpreter at the recursion limit, not by the program's own raise
            return fault("StackOverflow", where + "overflowed its stack (" + int_repr(limit) + " frames)")
        if _isinstance(e, _SystemExit):
            return fault("Exited", where + "exited (sys.exit) before its tests were done")
        try:
            text = type_name(_type(e)) + ": " + _str(e)
        except _BaseException:
            text = type_name(_type(e))
        return fault("Threw", where + "threw " + text[:500])

    return fault, failure

def _runners(on, off, stopped, work, stdout):
    """(calls, stdio): the two kinds of tests."""
    dump, NotJson = _json_writer()
    fault, failure = _faults(stopped)
    _type, _len, _str, _set, _enumerate, _callable, int_repr, exec_, compile_ = type, len, str, set, enumerate, callable, int.__repr__, exec, compile
    # the exceptions caught here, taken before a program can rebind their names in builtins
    _SyntaxError, _RecursionError, _ValueError, _SystemExit, _BaseException = SyntaxError, RecursionError, ValueError, SystemExit, BaseException
    type_name = type.__dict__["__name__"].__get__
    text_io, bytes_io = io.TextIOWrapper, io.BytesIO

    def load(source, name):
        code = compile_(source, "<program>", "exec", dont_inherit=True)
        g = {"__name__": name, "__builtins__": builtins}
        on()
        try:
            exec_(code, g)
        finally:
            off()
        return g

    def result(value, where, result_chars):
        try:
            text = dump(value, _set())
        except NotJson as e:
            return fault("ResultNotSerializable", where + _str(e))
        except _RecursionError:
            return fault("ResultNotSerializable", where + "returned a value nested too deeply to write as JSON")
        except _ValueError as e:
            return fault("OutputLimit", where + "returned a number too long to write (" + _str(e)[:200] + ")")
        if _len(text) > result_chars:
            return fault("OutputLimit", where + "returned a result of " + int_repr(_len(text)) + " characters, over the limit of " + int_repr(result_chars))
        return text

    def calls(source, name, args_list, result_chars):
        """Each test in fresh globals: load the program, call name(*args), write the result as JSON."""
        results = []
        for i, args in _enumerate(args_list):
            where = "test " + int_repr(i + 1) + ": "
            try:
                # not __main__: a program's own "if __name__ == '__main__':" block does not run under function tests
                g = load(source, "solution")
            except _SyntaxError as e:
                return fault("Threw", "does not compile: " + _str(e)[:500])
            except _BaseException as e:
                return failure(e, where)
            fn = g.get(name)
            if fn is None or not _callable(fn):
                return fault("NotAFunction", "defines no function " + name + ("" if fn is None else " (it is a " + type_name(_type(fn)) + ")"))
            on()
            try:
                value = fn(*args)
            except _BaseException as e:
                off()
                return failure(e, where)
            off()
            if stopped() is not None:
                return fault(stopped(), where)
            text = result(value, where, result_chars)
            if _type(text) is not _str:
                return text
            results.append(text)
        return {"ok": True, "results": results, "work": work()}

    def stdio(source, index, data):
        """One stdin/stdout case: the program runs as __main__; sys.exit(0) ends it normally."""
        where = "case " + int_repr(index + 1) + ": "
        sys.stdin = text_io(bytes_io(data.encode("utf-8")), encoding="utf-8")
        try:
            load(source, "__main__")
        except _SyntaxError as e:
            return fault("Threw", "does not compile: " + _str(e)[:500])
        except _SystemExit as e:
            if stopped() is not None:
                return fault(stopped(), where)
            if e.code is not None and e.code != 0:
                return fault("Exited", where + "exited with status " + (int_repr(e.code) if _type(e.code) is int else "1"))
        except _BaseException as e:
            return failure(e, where)
        finally:
            try:
                stdout().flush()
            except _BaseException:
                pass
        if stopped() is not None:
            return fault(stopped(), where)
        return {"ok": True, "work": work()}

    return calls, stdio

def _harness():
    begin, on, off, stopped, flag, work = _budget()
    reset, stdout = _baseline(_refuse(), off)
    calls, stdio = _runners(on, off, stopped, work, stdout)
    return begin, flag, reset, calls, stdio, work

H_begin, H_flag, H_reset, H_calls, H_stdio, H_work = _harness()
del _harness, _budget, _refuse, _baseline, _faults, _runners, _json_writer
`
