"""Kubernetes' library values (Quantity, IP, CIDR, URL, Semver, Format) and Kyverno's image
reference as typed values.

The API server gives each its own CEL type (``kubernetes.Quantity``, ``net.IP``,
``net.CIDR``, ``kubernetes.URL``, ``kubernetes.Semver``, ``kubernetes.NamedFormat``): a
quantity is no map, ``type(quantity('1'))`` is not ``map``, and a map in the object shaped
like one is no quantity. The runtime's Python functions can return only CEL values, and a
protobuf message is one: each library value travels as a message of a type of that name
(declared here, with one field holding its parts as canonical JSON, so two equal values
are equal messages), and the adapter declares the functions over those types.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

# kind (as the libraries name it) -> the API server's type name
TYPE_NAMES = {
    "quantity": "kubernetes.Quantity",
    "ip": "net.IP",
    "cidr": "net.CIDR",
    "url": "kubernetes.URL",
    "semver": "kubernetes.Semver",
    "format": "kubernetes.NamedFormat",
    "image": "kyverno.image",  # Kyverno's image reference (kyverno_image.py)
    "gvr": "schema.GroupVersionResource",  # Kyverno's resource.ToGVR (kyverno_resource.py)
}
FIELD = "assay_parts"  # the one field: no CEL of Kubernetes' selects a field of these


@cache
def pool() -> descriptor_pool.DescriptorPool:
    """The descriptor pool declaring every library value's message type (once a process)."""
    out = descriptor_pool.DescriptorPool()
    by_package: dict[str, list[str]] = {}
    for name in TYPE_NAMES.values():
        package, _, message = name.rpartition(".")
        by_package.setdefault(package, []).append(message)
    for package, messages in sorted(by_package.items()):
        file = descriptor_pb2.FileDescriptorProto(
            name=f"assay/cel_values_{package}.proto", package=package, syntax="proto3"
        )
        for message in messages:
            field = file.message_type.add(name=message).field.add(name=FIELD, number=1)
            field.type = descriptor_pb2.FieldDescriptorProto.TYPE_STRING
            field.label = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
        out.Add(file)
    return out


@cache
def _message_class(kind: str) -> Any:
    return message_factory.GetMessageClass(pool().FindMessageTypeByName(TYPE_NAMES[kind]))


def make(kind: str, fields: dict[str, Any]) -> Any:
    """The library value of ``kind`` with these parts."""
    parts = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return _message_class(kind)(**{FIELD: parts})


def parts(value: Any, kind: str) -> dict[str, Any] | None:
    """The parts of a library value of ``kind``; None for any other value."""
    descriptor = getattr(value, "DESCRIPTOR", None)
    if descriptor is None or descriptor.full_name != TYPE_NAMES[kind]:
        return None
    found = json.loads(getattr(value, FIELD))
    return found if isinstance(found, dict) else None
