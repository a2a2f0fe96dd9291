"""The `agent-state` group: the global options, the commands, and one-line errors.

Each command is a module of this package with a `command` (a click command; `commands` when
it has several); `COMMANDS` names them, so a new command (export, import, forget-user,
import-m365) is one more module and one more name here.
"""

from __future__ import annotations

import importlib
import sys

import click

from .. import StateError
from ..backends import (
    ConflictError,
    FormatError,
    InvalidKeyError,
    InvalidValueError,
    StorageConfigError,
    StorageError,
    StorageUnavailableError,
)
from ._store import CommandError, Options

COMMANDS = (
    "_inspect",
    "_ls",
    "_edit",
    "_migrate",
    "_export",
    "_import",
    "_forget_user",
    "_regroup",
    "_import_m365",
    "_doctor",
    "_serve",
)
"""The modules whose `command` the group runs, in the order `--help` lists them."""


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--store",
    metavar="URL",
    envvar="AGENT_STATE_URL",
    help="The storage URL (memory://, file://, redis://, azure-blob://, cosmos://); "
    "default: $AGENT_STATE_URL.",
)
@click.pass_context
def cli(ctx: click.Context, store: str | None) -> None:
    """Look at, change and migrate the state of agent-state bots in any store."""
    ctx.obj = Options(store)


for _name in COMMANDS:
    _module = importlib.import_module(f"{__package__}.{_name}")
    for _command in _module.commands if hasattr(_module, "commands") else (_module.command,):
        cli.add_command(_command)


def run(argv: list[str]) -> int:
    """Run the command line; return the exit status (errors are one line on stderr)."""
    try:  # not standalone: errors come here; `ctx.exit(n)` and --help return their status
        status = cli.main(argv, prog_name="agent-state", standalone_mode=False)
    except click.exceptions.Abort:
        return _fail("interrupted", 130)
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None and exc.ctx.parent else None
        hint = f" (see '{command} --help')" if command else " (see --help)"
        return _fail(exc.format_message() + hint, 2)
    except click.ClickException as exc:
        return _fail(exc.format_message(), exc.exit_code)
    except CommandError as exc:
        return _fail(str(exc), 1)
    except StorageConfigError as exc:
        return _fail(f"{exc}: fix --store or $AGENT_STATE_URL", 1)
    except StorageUnavailableError as exc:
        return _fail(f"the store failed: {_line(exc)}: check that it runs and the credentials", 1)
    except ConflictError as exc:
        return _fail(f"{exc}: someone else changed it; read it again and retry", 1)
    except (InvalidKeyError, InvalidValueError) as exc:
        return _fail(str(exc), 1)
    except FormatError as exc:
        return _fail(f"{_line(exc)}: the stored format is not one this version reads", 1)
    except StorageError as exc:
        return _fail(_line(exc), 1)
    except StateError as exc:  # an unknown user, a half-finished export, a store that cannot list
        return _fail(_line(exc), 1)
    return status if isinstance(status, int) else 0


def _line(exc: BaseException) -> str:
    """An error's message on one line."""
    return " ".join(str(exc).split())


def _fail(message: str, status: int) -> int:
    sys.stderr.write(f"agent-state: error: {' '.join(message.split())}\n")
    return status
