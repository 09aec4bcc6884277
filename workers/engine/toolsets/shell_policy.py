"""What the shell toolset may run: the operator's YAML policy and how argv is matched against it.

Matching works on the argv that will actually be executed (after ``shlex.split``),
never on the raw text, so quoting cannot make a command look different from
what runs. A pattern is itself split with ``shlex`` into tokens, each matched
against exactly one argument (except the ``**`` forms):

* a plain word matches itself (case-sensitive);
* a word with ``*``, ``?`` or ``[...]`` is a glob over one argument whose
  wildcards stay inside one path segment: they never match ``/``, an argument
  with a ``..`` segment the pattern does not spell out, or a URL
  (``scheme://...``), so ``-in *`` cannot reach ``/etc/shadow``, ``../x`` or
  ``http://host/``;
* ``**`` matches zero or more whole arguments, options included, each under
  the same rule;
* ``{file}`` matches a relative path that resolves (symlinks followed, from
  ``working_dir``) to a file inside ``files_dir``;
* ``{host}`` matches ``HOST:PORT`` when that pair is on the policy's ``hosts``
  list (entries like ``api.internal:443`` or ``*.svc.cluster.local:443``);
* ``{*}`` (one argument) and ``{**}`` (any number) match anything: the explicit
  way to let a value hold ``/``, ``..`` or a URL;
* a token that does not itself start with ``-`` never matches an argument that
  does: a wildcard written for a value cannot be filled with an option
  (``helm status *`` does not match ``helm status --kubeconfig=/x``).

``deny`` patterns are a backstop, so their wildcards keep full reach: ``*`` and
``**`` there match any value (a deny rule can only refuse more); ``{file}`` and
``{host}`` are not allowed in them.

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
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

ANY_ARGUMENTS = "**"
ANYTHING = "{*}"
ANYTHING_ARGUMENTS = "{**}"
FILE = "{file}"
HOST = "{host}"
PLACEHOLDERS = frozenset({ANYTHING, ANYTHING_ARGUMENTS, FILE, HOST})
GLOB_CHARACTERS = frozenset("*?[")
DEFAULT_ENV_ALLOW = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
HARD_MAX_COMMAND_CHARS = 4096

# Names that look like credentials never pass to a child, even if listed:
# a typo in env_allow must not leak the worker's model key or cloud tokens.
_SECRET_LOOKING_ENV = re.compile(
    r"^(ASSAY_|AWS_|AZURE_|GOOGLE_|GCP_)|SECRET|TOKEN|PASSW|CREDENTIAL|PRIVATE|API_?KEY|_KEY$",
    re.IGNORECASE,
)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_PORT = re.compile(rf"^({_HOST_LABEL}(?:\.{_HOST_LABEL})*):(\d{{1,5}})$")
_HOST_ENTRY = re.compile(r"^((?:\*\.)?[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(\d{1,5})$")


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
    for token in tokens:
        if ("{" in token or "}" in token) and token not in PLACEHOLDERS:
            raise ValueError(
                f"pattern {pattern!r} has the unknown placeholder {token!r}; use one of "
                f"{', '.join(sorted(PLACEHOLDERS))} as a whole word"
            )
    return tokens


@dataclass(frozen=True)
class MatchRules:
    """What ``{file}`` and ``{host}`` accept, and whether wildcards are confined.

    ``confined`` is False for deny patterns only (see the module docstring).
    """

    files_dir: Path | None = None
    working_dir: Path | None = None
    hosts: tuple[tuple[str, int], ...] = ()
    confined: bool = True

    def file_matches(self, argument: str) -> bool:
        if self.files_dir is None or not argument or argument.startswith("/"):
            return False
        if _SCHEME.match(argument):  # file:, http:, ... are not plain relative paths
            return False
        base = self.working_dir or self.files_dir
        try:
            resolved = (base / argument).resolve()
            root = self.files_dir.resolve()
        except (OSError, RuntimeError, ValueError):
            return False
        return resolved != root and resolved.is_relative_to(root)

    def host_matches(self, argument: str) -> bool:
        found = _HOST_PORT.match(argument)
        if found is None:
            return False
        host, port = found.group(1).lower(), int(found.group(2))
        return any(port == p and fnmatchcase(host, h) for h, p in self.hosts)


UNCONFINED = MatchRules(confined=False)


def _confined_glob(token: str, argument: str) -> bool:
    """``token`` matches ``argument`` with wildcards that never cross a path segment."""
    if _URL.match(argument) and not _URL.match(token):
        return False
    pattern_parts, argument_parts = token.split("/"), argument.split("/")
    if len(pattern_parts) != len(argument_parts):
        return False
    for pattern_part, argument_part in zip(pattern_parts, argument_parts, strict=True):
        if argument_part == ".." and pattern_part != "..":
            return False
        if not fnmatchcase(argument_part, pattern_part):
            return False
    return True


def _plain_argument(argument: str) -> bool:
    """What a confined ``**`` may stand for: one segment, no ``..``, no URL."""
    return "/" not in argument and argument != ".." and not _URL.match(argument)


def _token_matches(token: str, argument: str, rules: MatchRules) -> bool:
    if argument.startswith("-") and not token.startswith("-"):
        return False
    if token == ANYTHING:
        return True
    if token == FILE:
        return rules.file_matches(argument)
    if token == HOST:
        return rules.host_matches(argument)
    if not rules.confined:
        return fnmatchcase(argument, token)
    return _confined_glob(token, argument)


def argv_matches(tokens: tuple[str, ...], argv: list[str], rules: MatchRules | None = None) -> bool:
    """Whether ``argv`` matches a split pattern (see the module docstring for the rules)."""
    rules = rules or MatchRules()
    # reachable[j]: the tokens seen so far can consume exactly argv[:j].
    reachable = [True] + [False] * len(argv)
    for token in tokens:
        step = [False] * (len(argv) + 1)
        if token in (ANY_ARGUMENTS, ANYTHING_ARGUMENTS):
            wide = token == ANYTHING_ARGUMENTS or not rules.confined
            seen = False
            for j in range(len(argv) + 1):
                seen = seen or reachable[j]
                step[j] = seen
                if j < len(argv) and not (wide or _plain_argument(argv[j])):
                    seen = False  # a confined ** cannot run across this argument
        else:
            for j in range(len(argv)):
                if reachable[j] and _token_matches(token, argv[j], rules):
                    step[j + 1] = True
        reachable = step
    return reachable[len(argv)]


class AvailableCommand(BaseModel):
    """One entry of the catalogue the model is shown."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pattern: str = Field(min_length=1, description="e.g. 'openssl x509 -noout -enddate -in *'")
    description: str = Field(min_length=1, max_length=500, description="Shown to the model.")
    output_repeats_arguments: bool = Field(
        default=False,
        description="The program prints (part of) its arguments back (date +FORMAT, echo): "
        "its output is then the model's own words and never verifies a citation.",
    )

    @field_validator("pattern")
    @classmethod
    def _program_is_literal(cls, pattern: str) -> str:
        program = split_pattern(pattern)[0]
        if program in (ANY_ARGUMENTS, *PLACEHOLDERS) or GLOB_CHARACTERS & set(program):
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
    files_dir: Path | None = Field(
        default=None,
        description="Where {file} arguments must resolve to; None = working_dir. Relative "
        "paths are taken from the config file's folder.",
    )
    hosts: list[str] = Field(
        default_factory=list,
        description="HOST:PORT pairs {host} accepts; HOST may start with '*.' (any subdomain).",
    )
    env_allow: list[str] = Field(default_factory=lambda: list(DEFAULT_ENV_ALLOW))

    @field_validator("allow")
    @classmethod
    def _patterns_split(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            split_pattern(pattern)
        return patterns

    @field_validator("deny")
    @classmethod
    def _deny_patterns_split(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if {FILE, HOST} & set(split_pattern(pattern)):
                raise ValueError(
                    f"deny pattern {pattern!r} uses {{file}} or {{host}}; a deny rule's "
                    "wildcards already match any value, write * instead"
                )
        return patterns

    @field_validator("hosts")
    @classmethod
    def _hosts_are_host_port(cls, hosts: list[str]) -> list[str]:
        for entry in hosts:
            found = _HOST_ENTRY.match(entry)
            if found is None or not 0 < int(found.group(2)) < 65536:
                raise ValueError(
                    f"hosts entry {entry!r} is not HOST:PORT (e.g. api.internal:443 or "
                    "*.svc.cluster.local:443; the port is a number from 1 to 65535)"
                )
        return hosts

    @model_validator(mode="after")
    def _placeholders_have_what_they_need(self) -> ShellPolicy:
        used = {t for tokens in [*self._allow_tokens, *self._available_tokens] for t in tokens}
        if HOST in used and not self.hosts:
            raise ValueError("a pattern uses {host} but the policy lists no hosts; add hosts:")
        return self

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

    @cached_property
    def rules(self) -> MatchRules:
        """What ``{file}`` and ``{host}`` accept under this policy."""
        hosts = []
        for entry in self.hosts:
            host, port = entry.rsplit(":", 1)
            hosts.append((host.lower(), int(port)))
        return MatchRules(
            files_dir=self.files_dir or self.working_dir,
            working_dir=self.working_dir,
            hosts=tuple(hosts),
        )

    def repeats_arguments(self, argv: list[str]) -> bool:
        """Whether a catalogue entry ``argv`` matches says the program prints its arguments.

        The engine cannot see which bytes of a program's output came from its argv, so
        the operator says so per entry; any matching entry that says so counts.
        """
        return any(
            command.output_repeats_arguments and argv_matches(tokens, argv, self.rules)
            for command, tokens in zip(self.available_commands, self._available_tokens, strict=True)
        )

    def refusal_for(self, argv: list[str]) -> str | None:
        """Why ``argv`` may not run, or ``None`` if it may (deny, then allow, then catalogue)."""
        for pattern, tokens in self._deny_tokens:
            if argv_matches(tokens, argv, UNCONFINED):
                return f"it matches the deny rule {pattern!r}"
        if not any(argv_matches(tokens, argv, self.rules) for tokens in self._allow_tokens):
            return "it is not permitted by the allow list"
        if not any(argv_matches(tokens, argv, self.rules) for tokens in self._available_tokens):
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
    folders: dict[str, Path] = {}
    for key in ("working_dir", "files_dir"):
        folder = getattr(policy, key) or policy.working_dir
        if not folder.is_absolute():
            folder = path.parent / folder
        folder = folder.resolve()
        if not folder.is_dir():
            raise ShellConfigError(
                f"the shell toolset {key} {folder} is not a directory; create it or fix "
                f"{key} in {path}"
            )
        folders[key] = folder
    return policy.model_copy(update=folders)
