"""Who may reach the inspector: loopback addresses and loopback host names only."""

from __future__ import annotations

import ipaddress

LOCAL_NAMES = frozenset({"localhost"})


class InspectorConfigError(ValueError):
    """The inspector would be reachable from other machines and that was not asked for."""


def is_loopback(host: str) -> bool:
    """Whether `host` (an address, `[v6]` or `localhost`) names this machine's loopback."""
    name = host.strip("[]").lower()
    if name in LOCAL_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind_host(host: str, *, allow_remote: bool = False) -> None:
    """Refuse to bind the inspector to `host` unless it is loopback or `allow_remote`."""
    if not allow_remote and not is_loopback(host):
        raise InspectorConfigError(
            f"refusing to serve the inspector on {host!r}: it edits the store without "
            "authentication; bind it to 127.0.0.1 (or pass --allow-remote deliberately)"
        )


def host_of(header: str) -> str:
    """The host name of a `Host` header (`name:port`, `[v6]:port`)."""
    if header.startswith("["):
        return header.partition("]")[0] + "]"
    return header.rpartition(":")[0] if header.count(":") == 1 else header
