"""Compare the CEL libraries on PyPI by measurement (docs/probes.md). Prints figures.

    python bench/cel_libraries.py CEL_SPEC_CHECKOUT [--per-eval 2000]

Run it in a scratch venv holding the three libraries (it is the one place besides the
adapter that imports them: it measures the candidates, the product uses one):
``pip install cel-expr-python==0.1.3 cel-python==0.5.0 common-expression-language==0.10.0``.
CEL_SPEC_CHECKOUT is a checkout of google/cel-spec; its ``tests/simple/testdata/*.textproto``
files are read from there (nothing is copied). Per library:

1. cel-spec conformance: the simple tests whose bindings and results are plain values (no
   protobuf messages, no unknowns, no check-only tests), each file with the extensions the
   library offers; a test passes when the value (or the error) is the expected one.
2. Kubernetes coverage: which of Kubernetes' CEL features compile and evaluate, natively.
3. Speed: a typical admission policy over a typical Pod, per evaluation.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# -- a small reader for the text format of the simple test files ---------------------------------

_TOKEN = re.compile(
    r'\s+|#[^\n]*|(?P<str>"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\')|(?P<punct>[{}:\[\],<>])'
    r"|(?P<word>[A-Za-z0-9_.+\-/]+)",
    re.S,
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def _unescape(text: str) -> bytes:
    out = bytearray()
    i = 0
    raw = text[1:-1]
    while i < len(raw):
        c = raw[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = raw[i + 1]
        if n in _ESCAPES:
            out += _ESCAPES[n].encode()
            i += 2
        elif n == "x":
            out.append(int(raw[i + 2 : i + 4], 16))
            i += 4
        elif n.isdigit():
            out.append(int(raw[i + 1 : i + 4], 8))
            i += 4
        elif n == "u":
            out += chr(int(raw[i + 2 : i + 6], 16)).encode()
            i += 6
        elif n == "U":
            out += chr(int(raw[i + 2 : i + 10], 16)).encode()
            i += 10
        else:
            out += n.encode()
            i += 2
    return bytes(out)


def _tokens(text: str) -> list[tuple[str, str]]:
    return [(m.lastgroup, m.group()) for m in _TOKEN.finditer(text) if m.lastgroup]


def _message(tokens: list[tuple[str, str]], i: int, end: str) -> tuple[dict[str, list[Any]], int]:
    out: dict[str, list[Any]] = {}
    value: Any
    while i < len(tokens) and tokens[i][1] != end:
        name = tokens[i][1]
        if name == "[":  # an extension or Any type URL: [type.googleapis.com/x] { ... }
            j = i
            while tokens[j][1] != "]":
                j += 1
            name = "".join(t for _, t in tokens[i : j + 1])
            i = j
        i += 1
        if tokens[i][1] == ":":
            i += 1
        if tokens[i][1] in ("{", "<"):
            close = "}" if tokens[i][1] == "{" else ">"
            value, i = _message(tokens, i + 1, close)
            i += 1
        elif tokens[i][1] == "[":
            value, i = [], i + 1
            while tokens[i][1] != "]":
                if tokens[i][1] == ",":
                    i += 1
                    continue
                value.append(tokens[i][1])
                i += 1
            i += 1
            out.setdefault(name, []).extend(value)
            continue
        else:
            parts = []
            while i < len(tokens) and tokens[i][0] == "str":
                parts.append(_unescape(tokens[i][1]))
                i += 1
            if parts:
                value = b"".join(parts)
            else:
                value = tokens[i][1]
                i += 1
        out.setdefault(name, []).append(value)
        if i < len(tokens) and tokens[i][1] in (",", ";"):
            i += 1
    return out, i


def parse_file(path: Path) -> dict[str, list[Any]]:
    return _message(_tokens(path.read_text()), 0, "\x00")[0]


class Unsupported(Exception):
    """A test this harness does not run (protobuf messages, unknowns...)."""


def _one(message: dict[str, list[Any]], key: str, default: Any = None) -> Any:
    return message.get(key, [default])[0]


def plain(value: dict[str, list[Any]]) -> Any:
    """A cel.expr.Value as a tagged Python value: (kind, value)."""
    for key, kind in (("int64_value", "int"), ("uint64_value", "uint")):
        if key in value:
            return (kind, int(_one(value, key)))
    if "double_value" in value:
        text = _one(value, "double_value")
        number = float(text.replace("inf", "inf")) if isinstance(text, str) else float(text)
        return ("double", number)
    if "string_value" in value:
        return ("string", _one(value, "string_value").decode())
    if "bytes_value" in value:
        return ("bytes", _one(value, "bytes_value"))
    if "bool_value" in value:
        return ("bool", _one(value, "bool_value") == "true")
    if "null_value" in value:
        return ("null", None)
    if "list_value" in value:
        items = _one(value, "list_value").get("values", [])
        return ("list", [plain(v) for v in items])
    if "map_value" in value:
        entries = _one(value, "map_value").get("entries", [])
        return ("map", [(plain(_one(e, "key")), plain(_one(e, "value"))) for e in entries])
    raise Unsupported(f"value {sorted(value)}")


def python(tagged: Any) -> Any:
    kind, value = tagged
    if kind == "list":
        return [python(v) for v in value]
    if kind == "map":
        return {python(k): python(v) for k, v in value}
    return value


def same(expected: Any, got: Any) -> bool:
    kind, value = expected
    if kind in ("int", "uint"):
        return isinstance(got, int) and not isinstance(got, bool) and got == value
    if kind == "double":
        if not isinstance(got, float):
            return False
        return (math.isnan(value) and math.isnan(got)) or got == value
    if kind == "string":
        return isinstance(got, str) and got == value
    if kind == "bytes":
        return isinstance(got, bytes) and got == value
    if kind == "bool":
        return isinstance(got, bool) and got == value
    if kind == "null":
        return got is None
    if kind == "list":
        return (
            isinstance(got, list)
            and len(got) == len(value)
            and all(same(e, g) for e, g in zip(value, got, strict=True))
        )
    if kind == "map":
        if not isinstance(got, dict) or len(got) != len(value):
            return False
        for key, item in value:
            match = [g for k, g in got.items() if same(key, k)]
            if len(match) != 1 or not same(item, match[0]):
                return False
        return True
    return False


# -- the three libraries ------------------------------------------------------------------------

Runner = Callable[[str, dict[str, Any], str], tuple[str, Any]]  # -> ("value"|"error", value)


def cel_expr_python() -> Runner:
    from cel_expr_python import cel
    from cel_expr_python.ext import (
        ext_bindings,
        ext_encoders,
        ext_math,
        ext_optional,
        ext_strings,
    )  # fmt: skip

    extensions = [ext_strings.ExtStrings(), ext_optional.ExtOptional(), ext_math.ExtMath(),
                  ext_bindings.ExtBindings(), ext_encoders.ExtEncoders()]  # fmt: skip
    envs: dict[tuple[str, ...], Any] = {}

    def run(expr: str, data: dict[str, Any], container: str) -> tuple[str, Any]:
        key = (container, *sorted(data))
        if key not in envs:
            envs[key] = cel.NewEnv(variables={k: cel.Type.DYN for k in data},
                                   extensions=extensions, container=container or None)  # fmt: skip
        value = envs[key].compile(expr).eval(data=data)
        if value.type().name() == "ERROR":
            return "error", str(value.value())
        return "value", value.plain_value()

    return run


def cel_python() -> Runner:
    import celpy

    def convert(v: Any) -> Any:
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, celpy.celtypes.UintType):
            return int(v)
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            return float(v)
        if isinstance(v, bytes):
            return bytes(v)
        if isinstance(v, str):
            return str(v)
        if isinstance(v, list):
            return [convert(x) for x in v]
        if isinstance(v, dict):
            return {convert(k): convert(x) for k, x in v.items()}
        return v

    def run(expr: str, data: dict[str, Any], container: str) -> tuple[str, Any]:
        env = celpy.Environment()
        program = env.program(env.compile(expr))
        result = program.evaluate({k: celpy.json_to_cel(v) for k, v in data.items()})
        if isinstance(result, celpy.CELEvalError):
            return "error", str(result)
        return "value", convert(result)

    return run


def common_expression_language() -> Runner:
    import cel

    def run(expr: str, data: dict[str, Any], container: str) -> tuple[str, Any]:
        context = cel.Context()
        for key, value in data.items():
            context.add_variable(key, value)
        return "value", cel.evaluate(expr, context)

    return run


LIBRARIES: dict[str, Callable[[], Runner]] = {
    "cel-expr-python 0.1.3": cel_expr_python,
    "cel-python 0.5.0": cel_python,
    "common-expression-language 0.10.0": common_expression_language,
}


def conformance(checkout: Path, runner: Runner) -> tuple[int, int, dict[str, tuple[int, int]]]:
    passed = total = 0
    per_file: dict[str, tuple[int, int]] = {}
    for path in sorted((checkout / "tests/simple/testdata").glob("*.textproto")):
        file_passed = file_total = 0
        for section in parse_file(path).get("section", []):
            for test in section.get("test", []):
                try:
                    if (
                        _one(test, "check_only") == "true"
                        or "unknown" in test
                        or "any_unknowns" in test
                    ):
                        raise Unsupported("check only / unknowns")
                    expr = _one(test, "expr", b"").decode()
                    data = {}
                    for entry in test.get("bindings", []):
                        value = _one(_one(entry, "value"), "value")
                        data[_one(entry, "key").decode()] = python(plain(value))
                    expected: Any
                    if "eval_error" in test or "any_eval_errors" in test:
                        expected = "error"
                    elif "typed_result" in test:
                        expected = plain(_one(_one(test, "typed_result"), "result"))
                    else:
                        expected = plain(_one(test, "value", {"bool_value": ["true"]}))
                    container = _one(test, "container", b"")
                    container = container.decode() if isinstance(container, bytes) else ""
                except Unsupported:
                    continue
                except Exception:
                    continue  # a shape this reader does not know: not counted for anyone
                file_total += 1
                try:
                    kind, got = runner(expr, data, container)
                except Exception:
                    kind, got = "error", None
                ok = (
                    kind == "error"
                    if expected == "error"
                    else kind == "value" and same(expected, got)
                )
                file_passed += ok
        per_file[path.stem] = (file_passed, file_total)
        passed += file_passed
        total += file_total
    return passed, total, per_file


# -- Kubernetes coverage and speed ----------------------------------------------------------------

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "web-7d9f", "namespace": "shop",
                 "labels": {"app": "web", "tier": "frontend"}},
    "spec": {
        "serviceAccountName": "web",
        "containers": [
            {"name": "web", "image": "registry.shop.example/web:1.4.2",
             "ports": [{"containerPort": 8080}],
             "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                           "requests": {"cpu": "100m", "memory": "128Mi"}},
             "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                 "capabilities": {"drop": ["ALL"]}}},
            {"name": "proxy", "image": "registry.shop.example/proxy:2.0.1",
             "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                 "capabilities": {"drop": ["ALL"]}}},
        ],
        "volumes": [{"name": "data", "emptyDir": {}},
                    {"name": "cfg", "configMap": {"name": "web"}}],
    },
    "status": {"phase": "Running"},
}  # fmt: skip
POLICY = (
    "object.spec.containers.all(c, has(c.securityContext) && "
    "has(c.securityContext.runAsNonRoot) && c.securityContext.runAsNonRoot == true && "
    "has(c.securityContext.allowPrivilegeEscalation) && "
    "c.securityContext.allowPrivilegeEscalation == false && "
    "c.image.startsWith('registry.shop.example/')) && "
    "object.spec.volumes.all(v, has(v.emptyDir) || has(v.configMap) || has(v.secret)) && "
    "has(object.metadata.labels) && 'app' in object.metadata.labels"
)
KUBERNETES = {
    "optional types": "object.?spec.?nodeName.orValue('') == '' && [1][?0].hasValue()",
    "x in (list)": "'web' in (object.spec.containers.map(c, c.name))",
    "size() in code points": "size('wéb') == 3",
    "strings (lowerAscii, split, ...)": "'A,B'.lowerAscii().split(',') == ['a', 'b']",
    "strings format": "'%s'.format(['x']) == 'x'",
    "lists (isSorted, sum, ...)": "[1, 2].isSorted() && [1, 2].sum() == 3",
    "sets": "sets.contains([1, 2], [1])",
    "regex find": "'a1'.find('[0-9]') == '1'",
    "url": "url('https://a.example/').getHost() == 'a.example'",
    "ip / cidr": "cidr('10.0.0.0/8').containsIP(ip('10.1.1.1'))",
    "quantity": "quantity('1Gi').isGreaterThan(quantity('1Mi'))",
    "semver": "semver('1.2.3').major() == 1",
    "two-variable comprehensions": "[1, 2].all(i, v, v > i)",
}


def kubernetes(runner: Runner) -> dict[str, bool]:
    out = {}
    for name, expr in KUBERNETES.items():
        try:
            kind, got = runner(expr, {"object": POD}, "")
            out[name] = kind == "value" and got is True
        except Exception:
            out[name] = False
    return out


def speed(name: str, evaluations: int) -> float | None:
    """Seconds per evaluation of POLICY over POD, compiled once."""
    if name.startswith("cel-expr-python"):
        from cel_expr_python import cel

        program = cel.NewEnv(variables={"object": cel.Type.DYN}).compile(POLICY)
        run: Callable[[], Any] = lambda: program.eval(data={"object": POD})  # noqa: E731
    elif name.startswith("cel-python"):
        import celpy

        env = celpy.Environment()
        compiled = env.program(env.compile(POLICY))
        run = lambda: compiled.evaluate({"object": celpy.json_to_cel(POD)})  # noqa: E731
    else:
        import cel

        compiled_rust = cel.compile(POLICY)
        run = lambda: compiled_rust.execute({"object": POD})  # noqa: E731
    run()
    count = max(evaluations // (50 if name.startswith("cel-python") else 1), 20)
    began = time.perf_counter()
    for _ in range(count):
        run()
    return (time.perf_counter() - began) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a checkout of google/cel-spec")
    parser.add_argument("--per-eval", type=int, default=2000)
    args = parser.parse_args()
    for name, factory in LIBRARIES.items():
        runner = factory()
        passed, total, per_file = conformance(args.checkout, runner)
        print(f"{name}: cel-spec simple tests {passed}/{total} ({100 * passed / total:.0f}%)")
        print("   " + ", ".join(f"{f} {p}/{t}" for f, (p, t) in per_file.items() if t))
        covered = kubernetes(runner)
        print(f"   Kubernetes features natively: {sum(covered.values())}/{len(covered)}: "
              + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in covered.items()))  # fmt: skip
        seconds = speed(name, args.per_eval)
        if seconds is not None:
            print(f"   typical policy over a Pod: {seconds * 1e6:,.1f} us per evaluation")


if __name__ == "__main__":
    main()
