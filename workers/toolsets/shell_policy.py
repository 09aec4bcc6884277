"""What the shell toolset may run: the operator's YAML policy and how argv is matched against it.

Matching works on the argv that will actually be executed (after ``shlex.split``),
never on the raw text, so quoting cannot make a command look different from
what runs. A pattern is itself split with ``shlex`` into tokens:

* each token is a glob (``fnmatch``, case-sensitive) matched against exactly one
  argument, so ``*`` never reaches across an argument boundary;
* a token that does not itself start with ``-`` never matches an argument that
  does: a wildcard written for a value cannot be filled with an option
  (``helm status *`` does not match ``helm status --kubeconfig=/x``);
* the token ``**`` matches zero or more whole arguments, options included.

Precedence, first hit decides:

1. ``deny``: argv matches any deny pattern -> refused (deny wins over everything);
2. ``allow``: argv matches no allow pattern -> refused;
3. ``available_commands``: argv matches no available pattern -> refused;
4. otherwise the command runs.

``allow`` is the operator's permit, ``available_commands`` the catalogue the
model is shown; a command must be in both. Every ``available_commands``
pattern starts with a literal program name, so the set of programs that can
ever run is fixed by the file.
"""

from __future__ import annotations

import re
import shlex
from fnmatch import fnmatchcase
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

ANY_ARGUMENTS = "**"
GLOB_CHARACTERS = frozenset("*?[")
DEFAULT_ENV_ALLOW = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
HARD_MAX_COMMAND_CHARS = 4096

# Names that look like credentials never pass to a child, even if listed:
# a typo in env_allow must not leak the worker's model key or cloud tokens.
_SECRET_LOOKING_ENV = re.compile(
    r"^(ASSAY_|AWS_|AZURE_|GOOGLE_|GCP_)|SECRET|TOKEN|PASSW|CREDENTIAL|PRIVATE|API_?KEY|_KEY$",
    re.IGNORECASE,
)


class ShellConfigError(ValueError):
    """The shell toolset's config file is missing or invalid (an operator error)."""


def split_pattern(pattern: str) -> tuple[str, ...]:
    """Tokens of one policy pattern; a pattern that cannot be split is a config error."""
    try:
        tokens = tuple(shlex.split(pattern))
    except ValueError as exc:
        raise ValueError(f"pattern {pattern!r} cannot be split into words: {exc}") from exc
    if not tokens:
        raise ValueError("a pattern must name at least a program")
    return tokens


def _token_matches(token: str, argument: str) -> bool:
    if argument.startswith("-") and not token.startswith("-"):
        return False
    return fnmatchcase(argument, token)


def argv_matches(tokens: tuple[str, ...], argv: list[str]) -> bool:
    """Whether ``argv`` matches a split pattern (see the module docstring for the rules)."""
    # reachable[j]: the tokens seen so far can consume exactly argv[:j].
    reachable = [True] + [False] * len(argv)
    for token in tokens:
        step = [False] * (len(argv) + 1)
        if token == ANY_ARGUMENTS:
            seen = False
            for j in range(len(argv) + 1):
                seen = seen or reachable[j]
                step[j] = seen
        else:
            for j in range(len(argv)):
                if reachable[j] and _token_matches(token, argv[j]):
                    step[j + 1] = True
        reachable = step
    return reachable[len(argv)]


class AvailableCommand(BaseModel):
    """One entry of the catalogue the model is shown."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(min_length=1, description="e.g. 'openssl x509 -noout -enddate -in *'")
    description: str = Field(min_length=1, max_length=500, description="Shown to the model.")

    @field_validator("pattern")
    @classmethod
    def _program_is_literal(cls, pattern: str) -> str:
        program = split_pattern(pattern)[0]
        if program == ANY_ARGUMENTS or GLOB_CHARACTERS & set(program):
            raise ValueError(f"pattern {pattern!r} must start with a literal program name")
        return pattern


class ShellPolicy(BaseModel):
    """The parsed YAML file named by ``AssaySettings.shell_config``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    available_commands: list[AvailableCommand] = Field(min_length=1)
    allow: list[str] = Field(min_length=1, description="No implicit permits: list them.")
    deny: list[str] = Field(default_factory=list)
    timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    output_limit_bytes: int = Field(default=16_384, ge=256, le=4_000_000)
    max_command_chars: int = Field(default=1024, ge=16, le=HARD_MAX_COMMAND_CHARS)
    working_dir: Path = Field(
        default=Path("."), description="Relative paths are taken from the config file's folder."
    )
    env_allow: list[str] = Field(default_factory=lambda: list(DEFAULT_ENV_ALLOW))

    @field_validator("allow", "deny")
    @classmethod
    def _patterns_split(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            split_pattern(pattern)
        return patterns

    @field_validator("env_allow")
    @classmethod
    def _no_secret_looking_names(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"env_allow entry {name!r} is not an environment variable name")
            if _SECRET_LOOKING_ENV.search(name):
                raise ValueError(
                    f"env_allow names {name!r}, which looks like a credential; remove it"
                )
        return names

    @cached_property
    def _deny_tokens(self) -> list[tuple[str, tuple[str, ...]]]:
        return [(p, split_pattern(p)) for p in self.deny]

    @cached_property
    def _allow_tokens(self) -> list[tuple[str, ...]]:
        return [split_pattern(p) for p in self.allow]

    @cached_property
    def _available_tokens(self) -> list[tuple[str, ...]]:
        return [split_pattern(c.pattern) for c in self.available_commands]

    def refusal_for(self, argv: list[str]) -> str | None:
        """Why ``argv`` may not run, or ``None`` if it may (deny, then allow, then catalogue)."""
        for pattern, tokens in self._deny_tokens:
            if argv_matches(tokens, argv):
                return f"it matches the deny rule {pattern!r}"
        if not any(argv_matches(tokens, argv) for tokens in self._allow_tokens):
            return "it is not permitted by the allow list"
        if not any(argv_matches(tokens, argv) for tokens in self._available_tokens):
            return "it is not one of the available commands listed in the tool description"
        return None


def load_shell_policy(path: Path) -> ShellPolicy:
    """Read and validate the policy file; ``ShellConfigError`` says what to fix."""
    try:
        raw: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ShellConfigError(
            f"cannot read the shell toolset config {path} ({exc.strerror}); "
            "fix ASSAY_SHELL_CONFIG or create the file"
        ) from exc
    except yaml.YAMLError as exc:
        raise ShellConfigError(
            f"the shell toolset config {path} is not valid YAML; fix it: {exc}"
        ) from exc
    if not isinstance(raw, dict):
        raise ShellConfigError(f"the shell toolset config {path} must be a YAML mapping")
    try:
        policy = ShellPolicy.model_validate(raw)
    except ValidationError as exc:
        raise ShellConfigError(f"the shell toolset config {path} is invalid; fix: {exc}") from exc
    working_dir = policy.working_dir
    if not working_dir.is_absolute():
        working_dir = (path.parent / working_dir).resolve()
    if not working_dir.is_dir():
        raise ShellConfigError(
            f"the shell toolset working_dir {working_dir} is not a directory; create it or fix "
            f"working_dir in {path}"
        )
    return policy.model_copy(update={"working_dir": working_dir})
