"""An optional SASL_SSL client listener for the local broker: TLS from PEM files, SCRAM users.

With :class:`BrokerSecurity` the broker serves clients (and itself, as its inter-broker
listener) on SASL_SSL only; the KRaft controller port stays PLAINTEXT on the loopback host.
SCRAM credentials are written into the metadata log when the storage is formatted, so a broker
restarted on the same data directory keeps the users it was first formatted with.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from eaglefeed.core.errors import BrokerError

BROKER_USER = "eaglefeed-broker"
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256")
# nothing that the --add-scram parser of StorageTool splits on
_SAFE = re.compile(r"^[A-Za-z0-9._~!@#$%^&*+:/-]+$")


@dataclass(frozen=True)
class BrokerSecurity:
    """Serve clients on SASL_SSL: TLS with a PEM certificate and key, SCRAM users.

    Attributes:
        certfile: PEM certificate (chain) of the broker; its subject alternative names must name the
            host clients connect to (e.g. ``IP:127.0.0.1``).
        keyfile: the PEM private key of ``certfile`` (PKCS#8, unencrypted).
        cafile: PEM certificate of the CA that signed ``certfile`` (the broker's own truststore).
        users: SCRAM user → password, created when the storage is first formatted.
        mechanism: the SCRAM mechanism clients use.
    """

    certfile: Path
    keyfile: Path
    cafile: Path
    users: Mapping[str, str] = field(default_factory=dict, repr=False)
    mechanism: str = "SCRAM-SHA-512"


def listener_properties(security: BrokerSecurity, *, host: str, port: int, controller_port: int,
                        data_dir: Path) -> str:
    """The ``server.properties`` lines of a SASL_SSL client listener (and the inter-broker login).

    Writes the broker's PEM keystore (key + certificate) into ``data_dir/tls``, readable by the
    owner only.

    Raises:
        BrokerError: a certificate file is missing or the mechanism is unknown.
    """
    _check(security)
    tls = data_dir / "tls"
    tls.mkdir(parents=True, exist_ok=True)
    keystore = tls / "broker-keystore.pem"
    _write_private(keystore, security.keyfile.read_text() + "\n" + security.certfile.read_text())
    password = _broker_password(data_dir)
    mech = security.mechanism
    return "\n".join([
        f"listeners=SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller_port}",
        f"advertised.listeners=SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "inter.broker.listener.name=SASL_SSL",
        "controller.listener.names=CONTROLLER",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
        f"sasl.enabled.mechanisms={mech}",
        f"sasl.mechanism.inter.broker.protocol={mech}",
        f"listener.name.sasl_ssl.{mech.lower()}.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{BROKER_USER}" password="{password}";',
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={keystore}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={security.cafile.resolve()}",
        "ssl.client.auth=none",
        "",
    ])


def format_args(security: BrokerSecurity, data_dir: Path) -> list[str]:
    """``StorageTool format`` arguments that create the SCRAM users (the broker's own included).

    Raises:
        BrokerError: a user name or password holds a character the format tool cannot take.
    """
    users = {**security.users, BROKER_USER: _broker_password(data_dir)}
    args: list[str] = []
    for name, password in users.items():
        if not _SAFE.match(name) or not _SAFE.match(password):
            raise BrokerError(f"SCRAM user {name!r}: names and passwords may hold letters, digits "
                              "and ._~!@#$%^&*+:/- only")
        args += ["--add-scram", f"{security.mechanism}=[name={name},password={password}]"]
    return args


def _check(security: BrokerSecurity) -> None:
    if security.mechanism not in MECHANISMS:
        raise BrokerError(f"unknown SCRAM mechanism {security.mechanism!r}; one of {MECHANISMS}")
    for path in (security.certfile, security.keyfile, security.cafile):
        if not Path(path).is_file():
            raise BrokerError(f"TLS file {path} does not exist")


def _broker_password(data_dir: Path) -> str:
    """The inter-broker SCRAM password: made once per data directory, kept beside the storage."""
    path = data_dir / "broker.scram"
    if not path.exists():
        _write_private(path, secrets.token_urlsafe(24))
    return path.read_text().strip()


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
