"""Whether this process can listen on an address, checked before the controller touches any
switch: with a plain socket, closed again at once (a gRPC server that is never started keeps
the port it bound until the process exits, so it cannot be the probe)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from safs.core.errors import InvalidInput


def check_listen(option: str, address: str) -> None:
    """Raise unless a TCP listener could bind ``address`` now (``HOST:PORT`` or
    ``[IPV6]:PORT``; port 0: any) or, for ``unix:/PATH``, a Unix socket could be created there
    (its directory exists and is writable).

    Raises:
        InvalidInput: field ``option``: the port is in use, the host is not a local address
            or does not resolve, or the socket's directory is missing or read-only.
    """
    if address.startswith("unix:"):
        directory = Path(address.removeprefix("unix:")).parent
        if not directory.is_dir() or not os.access(directory, os.W_OK | os.X_OK):
            raise InvalidInput(option, f"cannot create the Unix socket {address}: {directory} is not a writable "
                                       "directory")
        return
    host, _, port = address.rpartition(":")
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host.strip("[]"), int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, ValueError, OverflowError) as err:
        raise InvalidInput(option, f"cannot resolve {address}: {err}") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC and http.server do
        try:
            sock.bind(sockaddr)
        except OSError as err:
            raise InvalidInput(option, f"cannot listen on {address}: {err.strerror}") from None
