"""Derive `tinker_public.proto` from the descriptor that the Tinker Python SDK publishes.

The SDK ships `tinker/proto/tinker_public_pb2.py`, whose `AddSerializedFile(b'...')`
literal is the serialized `FileDescriptorProto` of the public wire messages. This
script reads that literal (without running any SDK code), decodes it with python's
`protobuf` and prints it as a `.proto` file: same package, messages, field numbers,
field order, oneofs, proto3 `optional`s, maps and enums.

Usage:
    python scripts/proto/derive.py <sdk-folder> [out.proto]
    python scripts/proto/derive.py <sdk-folder> --check [generated_pb.ts]

`--check` compares the descriptor embedded in the generated TypeScript with the SDK's
(ignoring `json_name`, which protoc fills in and the SDK's copy leaves out).

<sdk-folder> is the SDK checkout (holding `src/tinker/...`) or its `src/` folder.
The output defaults to src/backends/http/wire/proto/tinker_public.proto; afterwards run
`npm run proto` to regenerate the TypeScript.
"""

from __future__ import annotations

import ast
import base64
import re
import sys
from pathlib import Path

from google.protobuf import descriptor_pb2

F = descriptor_pb2.FieldDescriptorProto

SCALARS = {
    F.TYPE_DOUBLE: "double",
    F.TYPE_FLOAT: "float",
    F.TYPE_INT64: "int64",
    F.TYPE_UINT64: "uint64",
    F.TYPE_INT32: "int32",
    F.TYPE_FIXED64: "fixed64",
    F.TYPE_FIXED32: "fixed32",
    F.TYPE_BOOL: "bool",
    F.TYPE_STRING: "string",
    F.TYPE_BYTES: "bytes",
    F.TYPE_UINT32: "uint32",
    F.TYPE_SFIXED32: "sfixed32",
    F.TYPE_SFIXED64: "sfixed64",
    F.TYPE_SINT32: "sint32",
    F.TYPE_SINT64: "sint64",
}


def find_pb2(folder: Path) -> Path:
    for candidate in (folder / "src" / "tinker" / "proto", folder / "tinker" / "proto"):
        path = candidate / "tinker_public_pb2.py"
        if path.is_file():
            return path
    raise SystemExit(f"no tinker/proto/tinker_public_pb2.py under {folder} or {folder}/src")


def serialized_descriptor(pb2: Path) -> bytes:
    """The bytes literal passed to `AddSerializedFile` in the generated module."""
    for node in ast.walk(ast.parse(pb2.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            return node.args[0].value
    raise SystemExit(f"no AddSerializedFile(b'...') in {pb2}")


def sdk_version(pb2: Path) -> str:
    """The `version` of the SDK's pyproject.toml, when the folder has one."""
    for folder in pb2.parents[2:4]:
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            match = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.MULTILINE)
            if match:
                return match.group(1)
    return "(version unknown)"


def type_name(field: descriptor_pb2.FieldDescriptorProto, package: str) -> str:
    if field.type in (F.TYPE_MESSAGE, F.TYPE_ENUM):
        name = field.type_name
        prefix = f".{package}."
        return name[len(prefix):] if name.startswith(prefix) else name
    return SCALARS[field.type]


def field_line(field, package: str, maps: dict[str, descriptor_pb2.DescriptorProto]) -> str:
    if field.label == F.LABEL_REPEATED and field.type == F.TYPE_MESSAGE and field.type_name in maps:
        entry = maps[field.type_name]
        key, value = entry.field[0], entry.field[1]
        kind = f"map<{type_name(key, package)}, {type_name(value, package)}>"
    elif field.label == F.LABEL_REPEATED:
        kind = f"repeated {type_name(field, package)}"
    elif field.proto3_optional:
        kind = f"optional {type_name(field, package)}"
    else:
        kind = type_name(field, package)
    return f"{kind} {field.name} = {field.number};"


def message_lines(msg, package: str, scope: str, indent: str) -> list[str]:
    full = f"{scope}.{msg.name}"
    maps = {f"{full}.{n.name}": n for n in msg.nested_type if n.options.map_entry}
    lines = [f"{indent}message {msg.name} {{"]
    for nested in msg.nested_type:
        if not nested.options.map_entry:
            lines += message_lines(nested, package, full, indent + "  ")
    for enum in msg.enum_type:
        lines += enum_lines(enum, indent + "  ")
    real_oneof = lambda f: f.HasField("oneof_index") and not f.proto3_optional  # noqa: E731
    opened: set[int] = set()
    for field in msg.field:
        if real_oneof(field):
            index = field.oneof_index
            if index in opened:
                continue
            opened.add(index)
            lines.append(f"{indent}  oneof {msg.oneof_decl[index].name} {{")
            for member in msg.field:
                if real_oneof(member) and member.oneof_index == index:
                    lines.append(f"{indent}    {field_line(member, package, maps)}")
            lines.append(f"{indent}  }}")
        else:
            lines.append(f"{indent}  {field_line(field, package, maps)}")
    lines.append(f"{indent}}}")
    return lines


def enum_lines(enum, indent: str) -> list[str]:
    lines = [f"{indent}enum {enum.name} {{"]
    lines += [f"{indent}  {v.name} = {v.number};" for v in enum.value]
    lines.append(f"{indent}}}")
    return lines


def render(fd: descriptor_pb2.FileDescriptorProto, source: str, version: str) -> str:
    if fd.dependency:
        raise SystemExit(f"imports are not handled: {list(fd.dependency)}")
    out = [
        f"// Derived from the Tinker Python SDK {version} ({source}), the serialized",
        "// FileDescriptorProto of its public wire messages, by scripts/proto/derive.py.",
        "// Do not edit: rerun that script, then `npm run proto`.",
        "",
        f'syntax = "{fd.syntax or "proto2"}";',
        "",
        f"package {fd.package};",
    ]
    scope = f".{fd.package}"
    for msg in fd.message_type:
        out += [""] + message_lines(msg, fd.package, scope, "")
    for enum in fd.enum_type:
        out += [""] + enum_lines(enum, "")
    return "\n".join(out) + "\n"


def without_json_names(fd: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    def clear(messages) -> None:
        for msg in messages:
            for field in msg.field:
                field.ClearField("json_name")
            clear(msg.nested_type)

    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(fd)
    copy.ClearField("source_code_info")
    clear(copy.message_type)
    return copy


def check(sdk: descriptor_pb2.FileDescriptorProto, generated_ts: Path) -> None:
    match = re.search(r'fileDesc\("([^"]+)"', generated_ts.read_text())
    if match is None:
        raise SystemExit(f"no fileDesc(\"...\") in {generated_ts}")
    b64 = match.group(1) + "=" * (-len(match.group(1)) % 4)
    generated = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(b64))
    if without_json_names(generated) != without_json_names(sdk):
        raise SystemExit(f"{generated_ts} does not describe the SDK's messages: rerun derive.py and `npm run proto`")
    print(f"{generated_ts}: same descriptor as the SDK's")


def main() -> None:
    if len(sys.argv) not in (2, 3, 4):
        raise SystemExit(__doc__)
    pb2 = find_pb2(Path(sys.argv[1]))
    here = Path(__file__).resolve().parents[2] / "src/backends/http/wire/proto"
    fd = descriptor_pb2.FileDescriptorProto.FromString(serialized_descriptor(pb2))
    if len(sys.argv) >= 3 and sys.argv[2] == "--check":
        check(fd, Path(sys.argv[3]) if len(sys.argv) == 4 else here / "tinker_public_pb.ts")
        return
    out = Path(sys.argv[2]) if len(sys.argv) == 3 else here / "tinker_public.proto"
    text = render(fd, "tinker/proto/tinker_public_pb2.py", sdk_version(pb2))
    out.write_text(text)
    print(f"wrote {out} ({len(fd.message_type)} messages, {len(fd.enum_type)} enums)")


if __name__ == "__main__":
    main()
