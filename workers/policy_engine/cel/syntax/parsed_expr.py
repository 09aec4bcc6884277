"""The runtime's parse result as protobuf messages: ``cel.expr.ParsedExpr``.

The CEL runtime (cel-cpp's bindings) gives a parsed expression only as bytes: a
``google.protobuf.Any`` holding a ``cel.expr.ParsedExpr``, the message of CEL's public
specification (``cel/expr/syntax.proto``). No installed package ships that message, so its
descriptor is declared here, field by field as the specification numbers them, and
protobuf builds the message classes from it. Only what a parse yields is declared:
``CheckedExpr``'s types and references, and the constants a parser never writes
(durations, timestamps), are left out; fields not declared are kept by protobuf as
unknown and never read.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "cel.expr"
TYPE_URL = f"type.googleapis.com/{PACKAGE}.ParsedExpr"
_FIELD = descriptor_pb2.FieldDescriptorProto
_EXPR = f".{PACKAGE}.Expr"

# (message, [(field, number, type, message type or None, repeated, oneof index or None)])
_MESSAGES: dict[str, list[tuple[str, int, int, str | None, bool, int | None]]] = {
    "ParsedExpr": [
        ("expr", 2, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("source_info", 3, _FIELD.TYPE_MESSAGE, f".{PACKAGE}.SourceInfo", False, None),
    ],
    "Expr": [
        ("id", 2, _FIELD.TYPE_INT64, None, False, None),
        ("const_expr", 3, _FIELD.TYPE_MESSAGE, f".{PACKAGE}.Constant", False, 0),
        ("ident_expr", 4, _FIELD.TYPE_MESSAGE, f"{_EXPR}.Ident", False, 0),
        ("select_expr", 5, _FIELD.TYPE_MESSAGE, f"{_EXPR}.Select", False, 0),
        ("call_expr", 6, _FIELD.TYPE_MESSAGE, f"{_EXPR}.Call", False, 0),
        ("list_expr", 7, _FIELD.TYPE_MESSAGE, f"{_EXPR}.CreateList", False, 0),
        ("struct_expr", 8, _FIELD.TYPE_MESSAGE, f"{_EXPR}.CreateStruct", False, 0),
        ("comprehension_expr", 9, _FIELD.TYPE_MESSAGE, f"{_EXPR}.Comprehension", False, 0),
    ],
    "Expr.Ident": [("name", 1, _FIELD.TYPE_STRING, None, False, None)],
    "Expr.Select": [
        ("operand", 1, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("field", 2, _FIELD.TYPE_STRING, None, False, None),
        ("test_only", 3, _FIELD.TYPE_BOOL, None, False, None),
    ],
    "Expr.Call": [
        ("target", 1, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("function", 2, _FIELD.TYPE_STRING, None, False, None),
        ("args", 3, _FIELD.TYPE_MESSAGE, _EXPR, True, None),
    ],
    "Expr.CreateList": [
        ("elements", 1, _FIELD.TYPE_MESSAGE, _EXPR, True, None),
        ("optional_indices", 2, _FIELD.TYPE_INT32, None, True, None),
    ],
    "Expr.CreateStruct": [
        ("message_name", 1, _FIELD.TYPE_STRING, None, False, None),
        ("entries", 2, _FIELD.TYPE_MESSAGE, f"{_EXPR}.CreateStruct.Entry", True, None),
    ],
    "Expr.CreateStruct.Entry": [
        ("id", 1, _FIELD.TYPE_INT64, None, False, None),
        ("field_key", 2, _FIELD.TYPE_STRING, None, False, 0),
        ("map_key", 3, _FIELD.TYPE_MESSAGE, _EXPR, False, 0),
        ("value", 4, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("optional_entry", 5, _FIELD.TYPE_BOOL, None, False, None),
    ],
    "Expr.Comprehension": [
        ("iter_var", 1, _FIELD.TYPE_STRING, None, False, None),
        ("iter_range", 2, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("accu_var", 3, _FIELD.TYPE_STRING, None, False, None),
        ("accu_init", 4, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("loop_condition", 5, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("loop_step", 6, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("result", 7, _FIELD.TYPE_MESSAGE, _EXPR, False, None),
        ("iter_var2", 8, _FIELD.TYPE_STRING, None, False, None),
    ],
    "Constant": [
        ("null_value", 1, _FIELD.TYPE_ENUM, f".{PACKAGE}.NullValue", False, 0),
        ("bool_value", 2, _FIELD.TYPE_BOOL, None, False, 0),
        ("int64_value", 3, _FIELD.TYPE_INT64, None, False, 0),
        ("uint64_value", 4, _FIELD.TYPE_UINT64, None, False, 0),
        ("double_value", 5, _FIELD.TYPE_DOUBLE, None, False, 0),
        ("string_value", 6, _FIELD.TYPE_STRING, None, False, 0),
        ("bytes_value", 7, _FIELD.TYPE_BYTES, None, False, 0),
    ],
    "SourceInfo": [
        ("location", 2, _FIELD.TYPE_STRING, None, False, None),
        ("line_offsets", 3, _FIELD.TYPE_INT32, None, True, None),
        ("positions", 4, _FIELD.TYPE_MESSAGE, f".{PACKAGE}.SourceInfo.PositionsEntry", True, None),
    ],
    "SourceInfo.PositionsEntry": [
        ("key", 1, _FIELD.TYPE_INT64, None, False, None),
        ("value", 2, _FIELD.TYPE_INT32, None, False, None),
    ],
}
_ONEOFS = {"Expr": "expr_kind", "Expr.CreateStruct.Entry": "key_kind", "Constant": "constant_kind"}
_MAP_ENTRIES = frozenset({"SourceInfo.PositionsEntry"})


def _file() -> descriptor_pb2.FileDescriptorProto:
    file = descriptor_pb2.FileDescriptorProto(
        name="assay/cel_expr_syntax.proto", package=PACKAGE, syntax="proto3"
    )
    file.enum_type.add(name="NullValue").value.add(name="NULL_VALUE", number=0)
    declared: dict[str, Any] = {}
    for name in _MESSAGES:  # parents are listed before their nested messages
        parent, _, own = name.rpartition(".")
        holder = declared[parent].nested_type if parent else file.message_type
        message = holder.add(name=own)
        declared[name] = message
        if name in _ONEOFS:
            message.oneof_decl.add(name=_ONEOFS[name])
        if name in _MAP_ENTRIES:
            message.options.map_entry = True
        for field, number, kind, type_name, repeated, oneof in _MESSAGES[name]:
            label = _FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL
            entry = message.field.add(name=field, number=number, type=kind, label=label)
            if type_name:
                entry.type_name = type_name
            if oneof is not None:
                entry.oneof_index = oneof
    return file


@cache
def parsed_expr_class() -> Any:
    """The ``cel.expr.ParsedExpr`` message class (built once per process)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.ParsedExpr"))


def decode(serialized: bytes) -> Any:
    """The ``ParsedExpr`` in the runtime's serialized form (an ``Any`` holding it);
    ValueError when it holds something else."""
    wrapper = any_pb2.Any()
    wrapper.ParseFromString(serialized)
    if wrapper.type_url != TYPE_URL:
        raise ValueError(f"the runtime gave {wrapper.type_url or 'nothing'}, not a ParsedExpr")
    parsed = parsed_expr_class()()
    parsed.ParseFromString(wrapper.value)
    return parsed
