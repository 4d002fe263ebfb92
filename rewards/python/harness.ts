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

/** The harness (Python source). It defines `H_begin`, `H_flag`, `H_reset`, `H_calls`, `H_stdio`, `H_work`. @internal */
export const harnessSource = String.raw`
import sys, builtins, os, posix, json.encoder, math, io

def _build():
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

    # --- what is refused ---
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

    modules = sys.modules
    hidden = {}
    for name in list(modules):
        if blocked(name):
            hidden[name] = modules.pop(name)
    sys.meta_path.insert(0, Refuse)
    for mod in (os, posix):
        for fn in ("system", "popen", "fork", "forkpty", "execv", "execve", "spawnv", "spawnve", "posix_spawn", "posix_spawnp", "kill", "killpg", "_exit"):
            if fn in mod.__dict__:
                del mod.__dict__[fn]
    del sys.monitoring

    # --- the baseline every evaluation starts from ---
    HOME = os.getcwd()
    base_modules = dict(modules)
    snapshots = [(m.__dict__, dict(m.__dict__)) for m in base_modules.values() if type(getattr(m, "__dict__", None)) is dict]
    lists = [(sys.path, list(sys.path)), (sys.meta_path, list(sys.meta_path)), (sys.path_hooks, list(sys.path_hooks))]
    environ = dict(os.environ)
    limit = sys.getrecursionlimit()
    digits = sys.get_int_max_str_digits()
    text_io, bytes_io, file_io = io.TextIOWrapper, io.BytesIO, io.FileIO
    sys_dict = sys.__dict__
    sys_snap = next(snap for d, snap in snapshots if d is sys_dict)
    std = [None, None]

    def fresh_std():
        # new stream objects: nothing a program left in a buffer (a flood cut by the cap) reaches the next evaluation
        for i, name in ((0, "stdout"), (1, "stderr")):
            std[i] = text_io(file_io(i + 1, "w", closefd=False), encoding="utf-8", errors="backslashreplace", line_buffering=True)
            sys_snap[name] = sys_snap["__" + name + "__"] = std[i]
    _type, _len, _list, _dict_items, _sorted, _id = type, len, list, dict.items, sorted, id
    int_repr, float_repr, str_of = int.__repr__, float.__repr__, json.encoder.encode_basestring
    type_name = type.__dict__["__name__"].__get__
    isfinite = math.isfinite
    _enumerate, _callable, _str, _isinstance = enumerate, callable, str, isinstance
    exec_, compile_ = exec, compile
    setrecursionlimit, set_digits, chdir, setprofile, settrace = sys.setrecursionlimit, sys.set_int_max_str_digits, os.chdir, sys.setprofile, sys.settrace
    environ_obj = os.environ

    def reset():
        set_events(TOOL, 0)
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
        if dict(environ_obj) != environ:
            environ_obj.clear()
            environ_obj.update(environ)
        setrecursionlimit(limit)
        set_digits(digits)
        chdir(HOME)

    class NotJson(Exception):
        pass

    def dump(v, seen):
        t = _type(v)
        if v is None:
            return "null"
        if t is bool:
            return "true" if v else "false"
        if t is int:
            return int_repr(v)
        if t is float:
            if not isfinite(v):
                raise NotJson("returned a float that is not finite (" + float_repr(v) + "), which has no JSON value")
            return float_repr(v)
        if t is str:
            return str_of(v)
        if t is list or t is tuple or t is set or t is frozenset or t is dict:
            if _id(v) in seen:
                raise NotJson("returned a " + type_name(t) + " that contains itself")
            seen.add(_id(v))
            try:
                if t is dict:
                    parts = []
                    for k, x in _dict_items(v):
                        kt = _type(k)
                        if kt is str:
                            key = str_of(k)
                        elif kt is int or kt is float or kt is bool or k is None:
                            key = str_of(dump(k, seen))
                        else:
                            raise NotJson("returned a dict with a key of type " + type_name(kt) + ", which has no JSON value")
                        parts.append(key + ":" + dump(x, seen))
                    return "{" + ",".join(parts) + "}"
                items = _list(v) if t is list or t is tuple else _sorted(v, key=order)
                return "[" + ",".join([dump(x, seen) for x in items]) + "]"
            finally:
                seen.discard(_id(v))
        raise NotJson("returned a " + type_name(t) + ", which has no JSON value")

    def order(x):
        t = _type(x)
        if t is int or t is float or t is bool:
            return (0, x, "")
        if t is str:
            return (1, 0, x)
        raise NotJson("returned a set of " + type_name(t) + ", which has no JSON value")

    def fault(reason, message):
        return {"ok": False, "reason": reason, "message": message}

    def failure(e, where):
        """The fault of an exception that ended a program: the host's stop reason first."""
        if st[2] is not None:
            return fault(st[2], where)
        if _type(e) is RecursionError and depth(e) >= limit // 2:
            # raised by the interpreter at the recursion limit, not by the program's own raise
            return fault("StackOverflow", where + "overflowed its stack (" + int_repr(limit) + " frames)")
        if _isinstance(e, SystemExit):
            return fault("Exited", where + "exited (sys.exit) before its tests were done")
        try:
            text = type_name(_type(e)) + ": " + _str(e)
        except BaseException:
            text = type_name(_type(e))
        return fault("Threw", where + "threw " + text[:500])

    def depth(e):
        n, tb = 0, e.__traceback__
        while tb is not None:
            n, tb = n + 1, tb.tb_next
        return n

    def begin(budget):
        st[0], st[1], st[2] = 0, budget, None
        FLAG[0] = 0

    def load(source, g):
        code = compile_(source, "<program>", "exec", dont_inherit=True)
        set_events(TOOL, EVENTS)
        try:
            exec_(code, g)
        finally:
            set_events(TOOL, 0)

    def fresh(name):
        return {"__name__": name, "__builtins__": builtins}

    def calls(source, name, args_list, result_chars):
        """Each test in fresh globals: load the program, call name(*args), write the result as JSON."""
        results = []
        for i, args in _enumerate(args_list):
            where = "test " + int_repr(i + 1) + ": "
            # not __main__: a program's own "if __name__ == '__main__':" block does not run under function tests
            g = fresh("solution")
            try:
                load(source, g)
            except SyntaxError as e:
                return fault("Threw", "does not compile: " + str(e)[:500])
            except BaseException as e:
                return failure(e, where)
            fn = g.get(name)
            if fn is None or not _callable(fn):
                return fault("NotAFunction", "defines no function " + name + ("" if fn is None else " (it is a " + type_name(_type(fn)) + ")"))
            set_events(TOOL, EVENTS)
            try:
                value = fn(*args)
            except BaseException as e:
                set_events(TOOL, 0)
                return failure(e, where)
            set_events(TOOL, 0)
            if st[2] is not None:
                return fault(st[2], where)
            try:
                text = dump(value, set())
            except NotJson as e:
                return fault("ResultNotSerializable", where + str(e))
            except RecursionError:
                return fault("ResultNotSerializable", where + "returned a value nested too deeply to write as JSON")
            except ValueError as e:
                return fault("OutputLimit", where + "returned a number too long to write (" + str(e)[:200] + ")")
            if _len(text) > result_chars:
                return fault("OutputLimit", where + "returned a result of " + int_repr(_len(text)) + " characters, over the limit of " + int_repr(result_chars))
            results.append(text)
        return {"ok": True, "results": results, "work": st[0]}

    def stdio(source, index, data):
        """One stdin/stdout case: the program runs as __main__; sys.exit(0) ends it normally."""
        where = "case " + int_repr(index + 1) + ": "
        sys.stdin = text_io(bytes_io(data.encode("utf-8")), encoding="utf-8")
        try:
            load(source, fresh("__main__"))
        except SyntaxError as e:
            return fault("Threw", "does not compile: " + str(e)[:500])
        except SystemExit as e:
            if st[2] is not None:
                return fault(st[2], where)
            code = e.code
            if code is not None and code != 0:
                return fault("Exited", where + "exited with status " + (int_repr(code) if _type(code) is int else "1"))
        except BaseException as e:
            return failure(e, where)
        finally:
            try:
                std[0].flush()
            except BaseException:
                pass
        if st[2] is not None:
            return fault(st[2], where)
        return {"ok": True, "work": st[0]}

    return begin, FLAG, reset, calls, stdio, lambda: st[0]

H_begin, H_flag, H_reset, H_calls, H_stdio, H_work = _build()
del _build
`
