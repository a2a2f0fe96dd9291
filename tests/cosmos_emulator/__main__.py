"""`python -m tests.cosmos_emulator [--host H] [--port P] [--key BASE64]`: serve the emulator."""

from __future__ import annotations

import argparse

from ._auth import MASTER_KEY
from ._server import serve


def main() -> None:
    parser = argparse.ArgumentParser(description="Cosmos DB protocol emulator for the tests")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--key", default=MASTER_KEY, help="master key (base64)")
    arguments = parser.parse_args()
    serve(arguments.host, arguments.port, arguments.key)


if __name__ == "__main__":
    main()
