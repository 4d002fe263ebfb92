/**
 * The Python writer of results as JSON, shared by the embedded harness and the script a
 * service runs. It is built from the interpreter's own C functions, captured before any
 * program runs, so a program that replaces `json`, `repr` or a builtin cannot change how
 * its results are written: exact `None`, `bool`, `int`, `float` (finite), `str`, `list`,
 * `tuple`, `dict` (keys `str`, `int`, `float`, `bool`, `None`), `set` and `frozenset`
 * (sorted) only; anything else (an object whose `__eq__` is always true, a subclass) has
 * no JSON value.
 *
 * @since 0.1.0
 */

/** Python source defining `_json_writer()`, which returns `(dump, NotJson)`. @internal */
export const serializerSource = String.raw`
def _json_writer():
    import json.encoder, math
    _type, _list, _items, _sorted, _id = type, list, dict.items, sorted, id
    int_repr, float_repr, str_of = int.__repr__, float.__repr__, json.encoder.encode_basestring
    type_name = type.__dict__["__name__"].__get__
    isfinite = math.isfinite

    class NotJson(Exception):
        pass

    def order(x):
        t = _type(x)
        if t is int or t is float or t is bool:
            return (0, x, "")
        if t is str:
            return (1, 0, x)
        raise NotJson("returned a set of " + type_name(t) + ", which has no JSON value")

    def key_of(k, seen):
        kt = _type(k)
        if kt is str:
            return str_of(k)
        if kt is int or kt is float or kt is bool or k is None:
            return str_of(dump(k, seen))
        raise NotJson("returned a dict with a key of type " + type_name(kt) + ", which has no JSON value")

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
        if not (t is list or t is tuple or t is set or t is frozenset or t is dict):
            raise NotJson("returned a " + type_name(t) + ", which has no JSON value")
        if _id(v) in seen:
            raise NotJson("returned a " + type_name(t) + " that contains itself")
        seen.add(_id(v))
        try:
            if t is dict:
                return "{" + ",".join([key_of(k, seen) + ":" + dump(x, seen) for k, x in _items(v)]) + "}"
            items = _list(v) if t is list or t is tuple else _sorted(v, key=order)
            return "[" + ",".join([dump(x, seen) for x in items]) + "]"
        finally:
            seen.discard(_id(v))

    return dump, NotJson
`
