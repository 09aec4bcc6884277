"""What the schemathesis run of tests/assay/test_api_openapi.py needs besides the schema.

Every request it sends is drawn from the published schema alone: the schema states each
rule the server checks, and what only the server's state can judge (a snapshot folder under
its roots, a context of its kubeconfig, a model litellm routes) is answered 404 or 409,
which schemathesis takes as an answer to a valid request. Two things remain here: the
kubeconfig the test's server reads (its contexts are what a glob may match), and a reader
for YAML streams (a probe's or policy's export is a policy and its binding: schemathesis'
own reader takes one document and fails on a second).

Loaded by schemathesis through ``SCHEMATHESIS_HOOKS=tests.api_fuzz_hooks``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import schemathesis
import yaml
from schemathesis.core.media_types import YAML_MEDIA_TYPES

from tests.kubeconfig_support import kubeconfig_text

KUBECONFIG = kubeconfig_text("east", "west")

POLICIES = Path(__file__).resolve().parent.parent / "examples" / "policies"


@schemathesis.deserializer(*YAML_MEDIA_TYPES)
def _yaml_stream(ctx: schemathesis.DeserializationContext, response: Any) -> object:
    """A probe's export is a YAML stream (a policy and its binding); schemathesis' own
    reader takes one document and fails on a second, so read every document."""
    return list(yaml.safe_load_all(response.content))
