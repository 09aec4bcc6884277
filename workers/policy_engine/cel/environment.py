"""What Kubernetes' CEL base environment holds at each version, and where each part comes from.

Mirrors the API server's table of versioned options (``k8s.io/apiserver/pkg/cel/environment/
base.go``): each library or option with the Kubernetes version that introduced it. Each
part is either one of the runtime's own extensions (``native``: its name and version in the
runtime's environment configuration), one of Kubernetes' libraries written in Python
(``module``: a module of ``cel.lib``), or an option the adapter sets (``option``). The
adapter (cel/programs.py) builds the runtime environment for a version from the parts introduced at
or before it; this module imports no runtime.

A probe is evaluated at :data:`PROBE_VERSION`: the environment an API server of Kubernetes
1.34 compiles a new ValidatingAdmissionPolicy in (its compatibility version is the release
before it), which a 1.33 API server also evaluates its stored policies in. So a probe uses
nothing an admission policy on either version would not have.
"""

from __future__ import annotations

from dataclasses import dataclass

KUBERNETES_VERSIONS = ("1.33", "1.34")
PROBE_VERSION = "1.33"


@dataclass(frozen=True)
class Part:
    """One library or option of the base environment."""

    name: str  # as Kubernetes or cel-go call it
    introduced: str  # the Kubernetes version that enabled it
    native: str | None = None  # the runtime's extension
    native_version: int | None = None
    module: str | None = None  # the cel.lib module written in Python
    option: str | None = None  # an option the adapter applies


BASE: tuple[Part, ...] = (
    Part("kubernetes.urls", "1.0", module="url"),
    Part("kubernetes.regex", "1.0", module="regex"),
    Part("kubernetes.lists", "1.0", module="lists"),
    Part("cross-type numeric comparisons", "1.28", option="cross_type_numeric_comparisons"),
    # cel-go's latest optional library (version 2: first/last; not unwrap/unwrapOpt, which
    # the runtime lacks)
    Part("optional types", "1.28", native="optional", native_version=2),
    Part("kubernetes.quantity", "1.28", module="quantity"),
    # the runtime's own strings extension (version 2) has these functions but differs from
    # cel-go in substring and indexOf/lastIndexOf (cel/lib/strings.py): written in Python
    Part("cel-go strings, version 2", "1.29", module="strings"),
    Part("cel-go sets", "1.29", native="cel.lib.ext.sets", native_version=0),
    Part("kubernetes.net.ip and net.cidr", "1.30", module="ip"),
    Part("kubernetes format", "1.31", module="format"),
    Part(
        "cel-go two-variable comprehensions",
        "1.32",
        native="cel.lib.ext.comprev2",
        native_version=0,
        module="comprehensions",
    ),
    Part("kubernetes.Semver, version 1", "1.33", module="semver"),
    # cel-go lists version 3 (version 2's functions with cost estimates): the runtime's
    # version 2 has the same functions
    Part("cel-go lists, version 3", "1.34", native="cel.lib.ext.lists", native_version=2),
)


# Libraries of a policy engine, not of Kubernetes: declared in every environment (a probe's
# expression compiles the same way everywhere) but answering only where the engine's own
# policy is run (cel/lib/kyverno_*.py: Kyverno's resource, globalContext, hash, json, image,
# math, time, gzip, transform, yaml and x509, served only around an imported Kyverno
# ValidatingPolicy's run; anywhere else a call is an error).
ENGINE_MODULES: tuple[str, ...] = (
    "kyverno_resource", "kyverno_hash", "kyverno_json", "kyverno_image", "kyverno_math",
    "kyverno_time", "kyverno_gzip", "kyverno_transform", "kyverno_yaml", "kyverno_x509",
)  # fmt: skip


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def parts(version: str = PROBE_VERSION) -> tuple[Part, ...]:
    """The parts of the base environment at Kubernetes ``version``."""
    if version not in KUBERNETES_VERSIONS:
        raise ValueError(
            f"Kubernetes {version} is not a stated version; use one of "
            f"{', '.join(KUBERNETES_VERSIONS)}"
        )
    return tuple(part for part in BASE if _key(part.introduced) <= _key(version))


def modules(version: str = PROBE_VERSION) -> list[str]:
    """The ``cel.lib`` modules of the environment at Kubernetes ``version``: Kubernetes'
    libraries written in Python, then the engines' (:data:`ENGINE_MODULES`)."""
    return [part.module for part in parts(version) if part.module] + list(ENGINE_MODULES)
