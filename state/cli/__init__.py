"""The `agent-state` command line (the `cli` extra: click and rich).

`main()` is the console script; `python -m agent_state` runs it too. Without the extra it
says which one to install instead of failing with an import error.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Run the command line with `argv` (default: the process's arguments); exits."""
    try:
        from ._main import run
    except ImportError as exc:
        if exc.name not in ("click", "rich"):
            raise
        sys.stderr.write(
            f"agent-state: the command line needs the 'cli' extra ({exc.name} is missing): "
            "pip install -e '.[cli]' in the agent-state clone\n"
        )
        raise SystemExit(1) from None
    raise SystemExit(run(sys.argv[1:] if argv is None else argv))


__all__ = ["main"]
