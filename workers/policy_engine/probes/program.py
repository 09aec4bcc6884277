"""A probe compiled as a whole: its variables, match conditions, and its expression or its
validations with their messages, sharing one cost meter (cost.py) over a probe run.

The runner (runner.py) evaluates it over what the lookups returned, the sensitivity check
(sensitivity.py) over counterfactuals. Semantics are a ValidatingAdmissionPolicy's:
``variables.NAME`` is evaluated only when read; an object is judged only when every match
condition is true; it passes when the expression (or every validation) is true, and a
failing validation's message is its ``message_expression`` (when that gives a string), else
its ``message``, else ``failed expression: EXPRESSION``. Any CEL error raises ``CelError``:
the probe then gives no value (fail-safe). A null field of an object is absent, as the API
server reads it (:func:`without_nulls`), for a model's probe and an imported
ValidatingAdmissionPolicy; Kyverno's and Gatekeeper's engines read it as null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.probe import ProposedProbe
from workers.policy_engine.cel.lib.base import holds_nul
from workers.policy_engine.cel.lib.kyverno_resource import judging
from workers.policy_engine.cel.programs import (
    MAX_STEPS,
    BoolProgram,
    CelError,
    StepMeter,
    field_paths,
)
from workers.policy_engine.probes.admission_inputs import ADMISSION_INPUTS
from workers.policy_engine.probes.run_constants import run_constants

# k8s.io/apiserver celconfig.MaxEvaluatedMessageExpressionSizeBytes
MAX_MESSAGE_BYTES = 5 * 1024


@dataclass(frozen=True)
class Judgement:
    """One object's (or one results-scope evaluation's) outcome."""

    judged: bool  # False: a match condition excluded it
    passed: bool = True
    message: str = ""
    exception: str | None = None  # the PolicyException whose condition exempted it


class ProbeProgram:
    """Every expression of ``probe`` compiled once; CelError when one does not compile, is
    too long, or uses what Kubernetes' environment lacks (naming which)."""

    def __init__(self, probe: ProposedProbe, *, max_steps: int = MAX_STEPS) -> None:
        self.probe = probe
        self.meter = StepMeter(max_steps)
        variables = [(v.name, v.expression) for v in probe.variables]
        # The API server reads objects through their structural schema (a null field is
        # absent); Kyverno and Gatekeeper evaluate their own policies over the object as
        # JSON, where a null field is null (their tests are labelled so).
        origin = probe.origin
        self.absent_nulls = origin is None or origin.format == "vap"
        # Only a Kyverno ValidatingPolicy reads the cluster through Kyverno's libraries, and
        # an admission-only one leaves the judged object out of what it reads
        self.names_judged = origin is not None and origin.format == "kyverno-validatingpolicy"
        params = probe.params
        if params is not None and self.absent_nulls:
            params = without_nulls(params)
        self.base: dict[str, Any] = {} if params is None else {"params": params}
        if holds_nul(self.base):
            raise CelError(f"its params hold {_NUL}")
        # what is the same for every object, computed once (run_constants.py)
        judged = probe.expressions()[len(probe.variables) :]
        slots = run_constants(variables, judged, self.base, self.meter)

        def program(text: str, what: str) -> BoolProgram:
            return BoolProgram(text, variables=variables, meter=self.meter, what=what, slots=slots)

        self.conditions = [
            (c.exception, program(c.expression, f"match condition {c.name}"))
            for c in probe.match_conditions
        ]
        self.main = program(probe.expression, "the expression") if probe.expression else None
        self.validations = [
            (
                v,
                program(v.expression, f"validation {number}"),
                program(v.message_expression, f"the message expression of validation {number}")
                if v.message_expression
                else None,
            )
            for number, v in enumerate(probe.validations)
        ]
        every = [p for _, p in self.conditions]
        every += [self.main] if self.main is not None else []
        every += [p for _, check, message in self.validations for p in (check, message)
                  if p is not None]  # fmt: skip
        # the admission inputs the probe reads (an imported policy's: admission_inputs.py)
        self.admission_inputs = frozenset(
            name for name in ADMISSION_INPUTS if any(p.compiled.reads(name) for p in every)
        )
        if self.admission_inputs and origin is None:
            raise CelError(
                f"it reads {', '.join(sorted(self.admission_inputs))}, which only an imported "
                "admission policy is given"
            )

    @property
    def steps(self) -> int:
        return self.meter.steps

    def refuse_beyond(self, objects: int) -> None:
        """CelError when judging ``objects`` objects one by one would take more steps than
        are left only to convert what every evaluation reads besides its object (params, the
        run's constants): refused before the first object, not after minutes of them."""
        programs = [p for _, p in self.conditions]
        programs += [self.main] if self.main is not None else []
        programs += [p for _, check, message in self.validations for p in (check, message)
                     if p is not None]  # fmt: skip
        each = sum(p.compiled.conversion_steps(self.base) for p in programs)
        left = self.meter.max_steps - self.meter.steps
        if each * objects > left:
            raise CelError(
                f"the probe is too costly to run: each of the {objects:,} objects would convert "
                f"the params and constants its expressions read again ({each:,} steps each, "
                f"{left:,} left of the run's {self.meter.max_steps:,})"
            )

    def reads(self, name: str) -> bool:
        """Whether the value (the expression or a validation, with the variables they read)
        reads the input ``name``."""
        deciding = [self.main] if self.main else [p for _, p, _ in self.validations]
        return any(p.compiled.reads(name) for p in deciding if p is not None)

    def fields(self) -> list[str]:
        """The field paths the probe's expressions read (each parsed on its own: a comment
        ends at its own line, not at the next expression's)."""
        seen: dict[str, None] = {}
        for expression in self.probe.expressions():
            seen.update(dict.fromkeys(field_paths(expression)))
        return list(seen)[:50]

    def judge(self, bindings: Mapping[str, Any]) -> Judgement:
        """The outcome over ``bindings`` (``{"object": ...}`` or ``{"results": [...]}``),
        with the object named as the one being judged (what an admission-only Kyverno
        policy's reads of the cluster leave out)."""
        if not self.names_judged:
            return self._judge(bindings)
        with judging(bindings.get("object")):
            return self._judge(bindings)

    def _judge(self, bindings: Mapping[str, Any]) -> Judgement:
        if holds_nul(bindings):
            raise CelError(f"{_named(bindings.get('object'))} holds {_NUL}")
        if self.absent_nulls:
            bindings = {name: without_nulls(value) for name, value in bindings.items()}
        data = {**self.base, **bindings}
        for exception, condition in self.conditions:
            if not condition(data):
                return Judgement(judged=False, exception=exception)
        if self.main is not None:
            passed = self.main(data)
            message = "" if passed else f"failed expression: {self.probe.expression}"
            return Judgement(judged=True, passed=passed, message=message)
        messages = [
            self._message(validation, message_program, data)
            for validation, check, message_program in self.validations
            if not check(data)
        ]
        return Judgement(judged=True, passed=not messages, message="; ".join(messages))

    def _message(
        self, validation: Any, message_program: BoolProgram | None, data: Mapping[str, Any]
    ) -> str:
        if message_program is not None:
            try:
                value = message_program.value(data, kinds=("STRING",))
            except CelError:
                value = None
            # as the API server: over 5,120 bytes, or with a line break, the static message
            if (
                isinstance(value, str)
                and value.strip()
                and len(value.encode()) <= MAX_MESSAGE_BYTES
                and not any(c in value for c in "\r\n")
            ):
                return value
        if validation.message:
            return str(validation.message)
        return f"failed expression: {validation.expression}"


# why a value holding a NUL character gets no verdict (cel/lib/base.py holds_nul)
_NUL = (
    "a string with a NUL character, which the CEL runtime would cut there: "
    "judged as cut it could pass, so nothing is judged"
)


def _named(obj: Any) -> str:
    """The judged object as a reader finds it (``Pod shop/web``), or what was judged."""
    if not isinstance(obj, dict):
        return "the values judged"
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    where = f"{meta.get('namespace')}/" if meta.get("namespace") else ""
    return f"{obj.get('kind') or 'the object'} {where}{meta.get('name') or ''}".strip()


def without_nulls(value: Any) -> Any:
    """``value`` with every null-valued field of an object removed (``value`` itself when it
    has none). The API server reads an object through its structural schema, where a field
    that is null is absent (k8s.io/apiserver/pkg/cel/common/values.go: "null valued nullable
    fields are treated the same as absent optional fields"): ``has()`` is false on it,
    ``?.`` gives none. A stored or listed object may still carry one (``securityContext:
    null``), on which the runtime would err ("Applying SELECT to non-message type",
    ``_?._(null_type, string)``). List elements are kept as they are."""
    if isinstance(value, dict):
        changed = False
        out: dict[str, Any] = {}
        for key, item in value.items():
            if item is None:
                changed = True
                continue
            kept = without_nulls(item)
            changed = changed or kept is not item
            out[key] = kept
        return out if changed else value
    if isinstance(value, list):
        items = [without_nulls(item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value
