"""The `assay` command line: the root app and the exit-code rules.

Commands live in ``assay/commands/`` by topic (evaluate, fleet, schedule,
serve, notify) and import their heavy dependencies (litellm, celery, redis) inside the
command body, so ``assay --help`` stays fast.

Usage errors exit 64, never a verdict code: click's default of 2 would read as
``poorly_posed`` to a CI job.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from assay import command_clock
from assay.commands import (
    apply,
    evaluate,
    fleet,
    notify,
    policy,
    probe,
    report,
    schedule,
    serve,
    spend,
)
from assay.commands import eval as eval_command
from assay.commands.fleet_common import ERROR_PREFIX
from assay.commands.options import SetupProblem
from assay.terminal_text import print_line
from schemas.exit_codes import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_MEANINGS,
    EXIT_USAGE,
)

try:  # typer >= 0.22 vendors click under typer._click; older typer uses click itself
    from typer._click import exceptions as click_exceptions  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_exceptions  # type: ignore[no-redef,unused-ignore]

# click >= 8.2 raises this (a UsageError) for a group given no command, with the help as
# its message; older click printed the help and exited 0 by itself.
_NO_ARGS_IS_HELP: Any = getattr(click_exceptions, "NoArgsIsHelpError", None)

app = typer.Typer(
    name="assay",
    help="Evaluate plain-language predicates about Kubernetes clusters.\n\n"
    f"Exit codes: {', '.join(f'{code} {meaning}' for code, meaning in EXIT_MEANINGS.items())}. "
    "Errors are one line on stderr starting 'assay: error:'.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish
    rich_markup_mode=None,  # plain help: no box drawing, no <bool> placeholders, fits 80 cols
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    """``assay --version``: what a newcomer types first (``assay version`` works too)."""
    if value:
        version()
        raise typer.Exit(0)


@app.callback()
def root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the assay version and exit.",
            is_eager=True,
            callback=_print_version,
        ),
    ] = False,
) -> None:
    """Evaluate plain-language predicates about Kubernetes clusters."""


for module in (
    evaluate,
    fleet,
    notify,
    schedule,
    serve,
    eval_command,
    probe,
    policy,
    apply,
    report,
    spend,
):
    module.register(app)


@app.command()
def version() -> None:
    """Print the assay version."""
    from importlib.metadata import version as dist_version

    typer.echo(dist_version("assay"))


def _command_name(exc: Any, argv: list[str]) -> str:
    """``assay schedule add``: the command a usage error is about.

    Some errors carry no context (an option given too few values), so the command is
    then read from the words of ``argv`` that name commands.
    """
    names: list[str] = []
    context = exc.ctx
    if context is None:
        return _command_in(argv)
    while context is not None and context.parent is not None:  # the root's name varies
        names.append(context.info_name or "")
        context = context.parent
    return " ".join(["assay", *reversed(names)])


def _command_in(argv: list[str]) -> str:
    command: Any = typer.main.get_command(app)
    names = ["assay"]
    for word in argv:
        commands = getattr(command, "commands", None)
        if not commands or word not in commands:
            break
        names.append(word)
        command = commands[word]
    return " ".join(names)


def _usage_error(exc: Any, argv: list[str]) -> None:
    """One line, with the prefix every user-facing error has, and where to read more.

    A group run without a command (``assay``, ``assay schedule``) gets its help as
    help, line by line, and then that one line: squashed into the error, the help
    was unreadable.
    """
    command = _command_name(exc, argv)
    if _NO_ARGS_IS_HELP is not None and isinstance(exc, _NO_ARGS_IS_HELP):
        print(exc.format_message(), file=sys.stderr)
        print(f"{ERROR_PREFIX}missing a command: pick one of those above", file=sys.stderr)
        return
    message = " ".join(exc.format_message().split()).removeprefix("Invalid value: ")
    print_line(f"{ERROR_PREFIX}{message} (see `{command} --help`)", sys.stderr)


def _broken_pipe(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was raised while handling, a write to a closed pipe.

    typer turns EPIPE into ``sys.exit(1)`` inside its ``except OSError``, so the
    ``SystemExit`` it raises carries the ``BrokenPipeError`` as its context.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, BrokenPipeError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's last flush cannot complain."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps click's usage errors to exit 64, a closed stdout to 141."""
    command_clock.begin(owns_process=argv is None)  # the `assay` script passes no argv
    try:
        result = app(args=argv, standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, not at exit as exit code 120
    except SystemExit as exc:
        if _broken_pipe(exc):
            _quiet_stdout()
            raise SystemExit(EXIT_BROKEN_PIPE) from None
        raise
    except BrokenPipeError:
        _quiet_stdout()
        raise SystemExit(EXIT_BROKEN_PIPE) from None
    except click_exceptions.UsageError as exc:
        _usage_error(exc, sys.argv[1:] if argv is None else argv)
        raise SystemExit(EXIT_USAGE) from None
    except SetupProblem as exc:
        print_line(f"{ERROR_PREFIX}{exc}", sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    except typer.Abort:
        print(f"{ERROR_PREFIX}aborted", file=sys.stderr)
        raise SystemExit(EXIT_INTERRUPTED) from None
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except click_exceptions.ClickException as exc:
        print_line(f"{ERROR_PREFIX}{exc.format_message()}", sys.stderr)
        raise SystemExit(EXIT_USAGE) from None
    except Exception as exc:  # a bug: Python's exit 1 would read as a `false` verdict
        import traceback

        traceback.print_exc()
        print_line(
            f"{ERROR_PREFIX}internal error ({type(exc).__name__}: {exc}); this is a bug in "
            "assay: please report it with the traceback above",
            sys.stderr,
        )
        raise SystemExit(EXIT_INTERNAL) from None
    raise SystemExit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
