"""A local Apache Kafka 4.x broker (KRaft, combined roles) run from Maven Central jars; ``cluster``: several.

The jars are resolved once with Maven from the ``pom.xml`` beside this module and cached;
the broker's storage, settings, pid and log live under one data directory, so a broker that
is stopped and started again keeps its topics and committed offsets.
"""

from __future__ import annotations

import base64
import fcntl
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from eaglefeed.core.errors import BrokerError
from eaglefeed.devtools.localbroker.security import BrokerSecurity, format_args, listener_properties
from eaglefeed.devtools.startup import bindable as _port_free
from eaglefeed.devtools.startup import port_open as _port_open
from eaglefeed.devtools.startup import process_alive as _alive
from eaglefeed.devtools.startup import terminate

KAFKA_VERSION = "4.4.0"
STARTED_MESSAGE = "Kafka Server started"

_SERVER_PROPERTIES = """\
# Written by eaglefeed: a node that is both broker and controller, on loopback.
process.roles=broker,controller
node.id={node_id}
{quorum}
{listeners}log.dirs={log_dir}
num.partitions=1
default.replication.factor={replicas}
min.insync.replicas={min_isr}
auto.create.topics.enable=false
offsets.topic.replication.factor={replicas}
offsets.topic.num.partitions=3
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min_isr}
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor={replicas}
share.coordinator.state.topic.min.isr={min_isr}
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
message.max.bytes=16777216
log.retention.hours=168
"""

_PLAINTEXT_LISTENERS = """\
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
"""


PID_FILE = "broker.pid"
"""The broker's pid, in its data dir: what ``status`` and ``stop`` look for."""


@dataclass(frozen=True)
class BrokerStatus:
    """What ``status`` found: whether the broker runs, its pid and its address."""

    running: bool
    pid: int | None
    bootstrap_servers: str | None
    data_dir: Path
    stale_pid: int | None = None
    """The pid the pid file names when no such process runs (a broker killed, or a machine restarted)."""

    def looked(self) -> str:
        """Where ``status`` looked and what it found there, for a "not running" line."""
        pid_file = (self.data_dir / PID_FILE).resolve()
        if self.stale_pid is not None:
            return f"{pid_file} names pid {self.stale_pid}, which is not running"
        return f"no {PID_FILE} in {pid_file.parent}"


def resolve_jars(cache_dir: Path) -> Path:
    """Return a folder holding the broker's jars, resolving them with Maven on first use.

    Args:
        cache_dir: where resolved jars are kept between runs.
    """
    lib = cache_dir / f"kafka-{KAFKA_VERSION}" / "lib"
    if (lib / ".complete").exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerError("Maven ('mvn') is needed once to fetch the Kafka jars; it is not on PATH")
    work = lib.parent
    work.mkdir(parents=True, exist_ok=True)
    # Parallel test processes (pytest-xdist) each start a broker: one resolves, the others wait for it.
    with open(work / ".resolve.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (lib / ".complete").exists():
            _resolve(mvn, work, lib)
    return lib


def _resolve(mvn: str, work: Path, lib: Path) -> None:
    pom = work / "pom.xml"
    pom.write_bytes(resources.files(__package__).joinpath("pom.xml").read_bytes())
    cmd = [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
           f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BrokerError("Maven could not resolve the Kafka jars:\n"
                          f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
    (lib / ".complete").write_text(KAFKA_VERSION)


def start(*, data_dir: Path, port: int, cache_dir: Path, host: str = "127.0.0.1",
          controller_port: int | None = None, timeout: float = 90.0,
          security: BrokerSecurity | None = None) -> BrokerStatus:
    """Start the broker in the background (or report the one already running there).

    Args:
        data_dir: storage, settings, pid file and logs of this broker.
        port: the client port (PLAINTEXT, or SASL_SSL with ``security``).
        cache_dir: jar cache, see :func:`resolve_jars`.
        host: the address to listen on and advertise.
        controller_port: the KRaft controller port (``port + 1`` by default).
        timeout: seconds to wait until the broker answers.
        security: serve clients on SASL_SSL with these TLS files and SCRAM users (pass the same
            value again when restarting on the same ``data_dir``).
    """
    current = status(data_dir)
    if current.running:
        return current
    for taken in (port, controller_port or port + 1):
        if not _port_free(host, taken):
            raise BrokerError(f"port {taken} on {host} is in use by another process; pick another --port")
    lib = resolve_jars(cache_dir)
    data_dir = data_dir.resolve()
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    props = data_dir / "server.properties"
    controller_port = controller_port or port + 1
    ports = {"host": host, "port": port, "controller_port": controller_port}
    listeners = (_PLAINTEXT_LISTENERS.format(**ports) if security is None
                 else listener_properties(security, data_dir=data_dir, host=host, port=port,
                                          controller_port=controller_port))
    props.write_text(_SERVER_PROPERTIES.format(
        listeners=listeners, log_dir=data_dir / "kraft", node_id=1, replicas=1, min_isr=1,
        quorum=f"controller.quorum.bootstrap.servers={host}:{controller_port}", **ports))
    if security is not None:
        props.chmod(0o600)  # it holds the inter-broker password
    log_config = data_dir / "log4j2.properties"
    log_config.write_bytes(resources.files(__package__).joinpath("log4j2.properties").read_bytes())
    java = _java(lib, logs, log_config)
    cluster_file = data_dir / "cluster.id"
    if not cluster_file.exists():
        cluster_file.write_text(_random_cluster_id())
    fmt = subprocess.run(
        [*java, "kafka.tools.StorageTool", "format", "--standalone", "--ignore-formatted",
         "-t", cluster_file.read_text().strip(), "-c", str(props),
         *(format_args(security, data_dir) if security is not None else [])],
        capture_output=True, text=True, check=False)
    if fmt.returncode != 0:
        raise BrokerError(f"formatting KRaft storage failed:\n{fmt.stdout[-2000:]}{fmt.stderr[-2000:]}")
    server_log = logs / "server.log"
    log_start = server_log.stat().st_size if server_log.exists() else 0
    with open(logs / "stdout.log", "ab") as out:
        proc = subprocess.Popen([*java, "kafka.Kafka", str(props)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    (data_dir / PID_FILE).write_text(str(proc.pid))
    (data_dir / "bootstrap").write_text(f"{host}:{port}")
    _wait_started(proc, server_log, log_start, host, port, timeout)
    return status(data_dir)


def stop(data_dir: Path, timeout: float = 60.0) -> bool:
    """Stop the broker of ``data_dir`` with SIGTERM (SIGKILL after ``timeout``).

    Returns:
        True if a running broker was stopped, False if none was running.
    """
    current = status(data_dir)
    if not current.running or current.pid is None:
        return False
    terminate(current.pid, timeout=timeout, poll=0.2)
    (data_dir / PID_FILE).unlink(missing_ok=True)
    return True


def status(data_dir: Path) -> BrokerStatus:
    """Report whether the broker of ``data_dir`` runs."""
    pid_file = data_dir / PID_FILE
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    running = pid is not None and _alive(pid)
    boot = data_dir / "bootstrap"
    return BrokerStatus(running=running, pid=pid if running else None,
                        bootstrap_servers=boot.read_text() if boot.exists() else None,
                        data_dir=data_dir, stale_pid=None if running else pid)


def _java(lib: Path, logs: Path, log_config: Path) -> list[str]:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java:
        raise BrokerError("Java 17+ is needed to run the broker; 'java' is not on PATH")
    return [java, "-Xms256m", "-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true", f"-Dkafka.logs.dir={logs}",
            f"-Dlog4j2.configurationFile={log_config}", "-cp", f"{lib}/*"]


def _wait_started(proc: subprocess.Popen[bytes], server_log: Path, offset: int,
                  host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"the broker exited with code {proc.returncode}; see {server_log}:\n"
                              + _tail(server_log))
        if server_log.exists():
            with open(server_log, "rb") as fh:
                fh.seek(offset)
                started = STARTED_MESSAGE.encode() in fh.read()
            if started and _port_open(host, port):
                return
        time.sleep(0.2)
    proc.terminate()
    raise BrokerError(f"the broker did not start within {timeout:.0f}s; see {server_log}")


def _tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _random_cluster_id() -> str:
    # Kafka's Uuid form: URL-safe base64 of 16 random bytes, no padding, not starting with '-'.
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not value.startswith("-"):
            return value
