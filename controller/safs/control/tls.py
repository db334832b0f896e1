"""TLS for the hint API and the controller's P4Runtime channels, and application identities.

Hint API (``safs controller --tls-cert FILE --tls-key FILE [--tls-client-ca FILE]``): gRPC's
TLS with a server certificate; with a client CA, mutual TLS (every client presents a
certificate that CA signed: the recommended mode). The files are read again when any of them
changes (modification time), so a renewed certificate is used from the next connection on,
without a restart (gRPC's ``dynamic_ssl_server_credentials``: its fetcher runs at each new
handshake).

Identities (``--tls-identities FILE``, mutual TLS only): the client certificate's common name
names an application; the file says which hosts each may announce dependencies and flows for
(as their sender) and how many live dependencies it may hold. A certificate whose name is not
in the file is refused. Docs: docs/operations.md, "TLS and identities".
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import grpc
from pydantic import Field, field_validator, model_validator

from safs.core.config import ConfigModel, FieldError
from safs.core.errors import InvalidInput
from safs.core.files import load_yaml


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of one TLS endpoint.

    Attributes:
        cert: certificate chain (server: its certificate; client: its own, for mutual TLS).
        key: the certificate's private key.
        ca: the CA to verify the peer against (server: client CA, None = no client
            certificates; client: the server's CA, None = the system's roots).

    Raises:
        InvalidInput: a file that does not exist (field named by ``option``), or a cert
            without its key.
    """

    cert: Path | None
    key: Path | None
    ca: Path | None = None
    option: str = "--tls"

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise InvalidInput(f"{self.option}-cert", f"{self.option}-cert and {self.option}-key go together")
        for what, path in (("cert", self.cert), ("key", self.key), ("client-ca" if self.option == "--tls" else "ca",
                                                                     self.ca)):
            if path is not None and not Path(path).is_file():
                raise InvalidInput(f"{self.option}-{what}", f"not a file: {path}")

    def read(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(cert, key, ca) contents (None where not given)."""
        return tuple(Path(p).read_bytes() if p is not None else None  # type: ignore[return-value]
                     for p in (self.cert, self.key, self.ca))

    def stamp(self) -> tuple[float, ...]:
        """Modification times of the files (what a reload compares)."""
        return tuple(os.stat(p).st_mtime_ns for p in (self.cert, self.key, self.ca) if p is not None)


def server_credentials(files: TlsFiles) -> grpc.ServerCredentials:
    """Server credentials that re-read ``files`` when they change (next handshake on).

    Raises:
        InvalidInput: no cert/key (field ``--tls-cert``).
    """
    if files.cert is None:
        raise InvalidInput("--tls-cert", "a TLS server needs a certificate and key")
    lock = threading.Lock()
    state = {"stamp": files.stamp()}

    def config() -> grpc.ServerCertificateConfiguration:
        cert, key, ca = files.read()
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=ca)

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        with lock:
            try:
                stamp = files.stamp()
                if stamp == state["stamp"]:
                    return None  # unchanged: keep the current one
                new = config()
            except OSError:
                return None  # being replaced: keep the current one until the files are whole
            state["stamp"] = stamp
            return new

    return grpc.dynamic_ssl_server_credentials(config(), fetch, require_client_authentication=files.ca is not None)


def channel_credentials(files: TlsFiles) -> grpc.ChannelCredentials:
    """Client credentials: trust ``files.ca`` (None: the system roots), present ``cert``/``key``
    when given (mutual TLS)."""
    cert, key, ca = files.read()
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)


class Application(ConfigModel):
    """One application of ``--tls-identities``: the hosts it may announce for, as sender, and
    how many live dependencies it may hold."""

    FIELD_PREFIX: ClassVar[str] = "applications.<name>."

    hosts: list[str]
    max_dependencies: int = Field(4096, ge=1, le=1 << 20)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: list[str]) -> list[str]:
        if not v or len(set(v)) != len(v):
            raise ValueError(f"must be a non-empty list of distinct host names, got {v!r}")
        return v


class Identities(ConfigModel):
    """``--tls-identities`` file: ``applications: {<certificate common name>: Application}``."""

    applications: dict[str, Application]

    @model_validator(mode="after")
    def _owners(self) -> Identities:
        if not self.applications:
            raise FieldError("applications", "names no application: every client would be refused")
        owner: dict[str, str] = {}
        for name, app in self.applications.items():
            for host in app.hosts:
                if host in owner:
                    raise FieldError("applications", f"host {host!r} belongs to both {owner[host]!r} and {name!r}; "
                                     "a host has one owner (quotas count over its hosts)")
                owner[host] = name
        return self


def load_identities(path: Path | str, hosts: list[str]) -> Identities:
    """Read and check an identities file against the topology's ``hosts``.

    Raises:
        InvalidInput: bad YAML, an unknown key, a value out of range or an unknown host (field
            ``applications.<name>.<key>``, source the file).
    """
    raw = load_yaml(path, "--tls-identities")
    ids = Identities.from_mapping(raw if isinstance(raw, dict) else {}, prefix="", source=str(path))
    for name, app in ids.applications.items():
        for host in app.hosts:
            if host not in hosts:
                raise InvalidInput(f"applications.{name}.hosts", f"unknown host {host!r}; the topology has "
                                   f"{len(hosts)} hosts", str(path))
    return ids


def peer_name(context: grpc.ServicerContext) -> str | None:
    """The common name of the client certificate of this call (None: no certificate)."""
    names = context.auth_context().get("x509_common_name")
    return names[0].decode() if names else None
