"""A local S3-compatible object store: s3proxy 2.6.0 run from Maven Central jars, filesystem-backed.

What the tests and ``eaglefeed store start`` use as the dataset's home in place of a cloud bucket,
as ``eaglefeed.devtools.localbroker`` stands in for a Kafka cluster: a real server speaking S3's
HTTP protocol with signed requests, not an in-process mock. The jars are resolved once with
Maven from the ``pom.xml`` beside this module and cached; the server's objects, settings, pid and
log live under one data directory, so a store stopped and started again keeps its buckets.

Known limits of this server (measured, docs/journal/object-store.md): it accepts conditional
puts (``If-None-Match``) without honouring them, and it has no quotas.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from eaglefeed.core.errors import EaglefeedError
from eaglefeed.devtools.startup import bindable, port_open, process_alive, terminate

S3PROXY_VERSION = "2.6.0"
ACCESS_KEY = "eaglefeed-local"
SECRET_KEY = "eaglefeed-local-secret"
"""The local store's only credentials (it listens on loopback only)."""
PID_FILE = "store.pid"
ENDPOINT_FILE = "endpoint"

_PROPERTIES = """\
# Written by eaglefeed: s3proxy on loopback, objects as files under {objects}.
s3proxy.endpoint=http://{host}:{port}
s3proxy.authorization=aws-v2-or-v4
s3proxy.identity={access_key}
s3proxy.credential={secret_key}
jclouds.provider=filesystem
jclouds.identity={access_key}
jclouds.credential={secret_key}
jclouds.filesystem.basedir={objects}
"""


class StoreError(EaglefeedError):
    """The local object store could not be set up, started or reached."""


@dataclass(frozen=True)
class StoreStatus:
    """Whether the store of ``data_dir`` runs, its pid and its endpoint URL."""

    running: bool
    pid: int | None
    endpoint: str | None
    data_dir: Path

    def environment(self) -> dict[str, str]:
        """The variables that point boto3 (and eaglefeed) at this store."""
        return {"AWS_ENDPOINT_URL": self.endpoint or "", "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}


def resolve_jars(cache_dir: Path) -> Path:
    """A folder holding s3proxy's jars, resolved with Maven on first use and cached in ``cache_dir``."""
    lib = cache_dir / f"s3proxy-{S3PROXY_VERSION}" / "lib"
    if (lib / ".complete").exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise StoreError("Maven ('mvn') is needed once to fetch the s3proxy jars; it is not on PATH")
    work = lib.parent
    work.mkdir(parents=True, exist_ok=True)
    with open(work / ".resolve.lock", "w") as lock:  # parallel test processes: one resolves
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (lib / ".complete").exists():
            pom = work / "pom.xml"
            pom.write_bytes(resources.files(__package__).joinpath("pom.xml").read_bytes())
            done = subprocess.run([mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                                   f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise StoreError("Maven could not resolve the s3proxy jars:\n"
                                 f"{done.stdout[-3000:]}{done.stderr[-2000:]}")
            (lib / ".complete").write_text(S3PROXY_VERSION)
    return lib


def start(*, data_dir: Path, port: int, cache_dir: Path, host: str = "127.0.0.1",
          timeout: float = 60.0) -> StoreStatus:
    """Start the store in the background (or report the one already running from ``data_dir``).

    Args:
        data_dir: objects (``objects/<bucket>/<key>``), settings, pid file and log.
        port: the HTTP port.
        cache_dir: the jar cache, see :func:`resolve_jars`.
        host: the address to listen on.
        timeout: seconds to wait until it answers.

    Raises:
        StoreError: the port is taken, Java or Maven is missing, or the server did not start.
    """
    current = status(data_dir)
    if current.running:
        return current
    if not bindable(host, port):
        raise StoreError(f"port {port} on {host} is in use by another process; pick another --port")
    lib = resolve_jars(cache_dir)
    data_dir = data_dir.resolve()
    objects = data_dir / "objects"
    objects.mkdir(parents=True, exist_ok=True)
    props = data_dir / "s3proxy.properties"
    props.write_text(_PROPERTIES.format(host=host, port=port, objects=objects, access_key=ACCESS_KEY,
                                        secret_key=SECRET_KEY))
    java = os.environ.get("JAVA_HOME")
    java = str(Path(java) / "bin" / "java") if java else shutil.which("java")
    if not java:
        raise StoreError("Java 11+ is needed to run the object store; 'java' is not on PATH")
    log = data_dir / "store.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [java, "-Xms64m", "-Xmx512m", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
             "-Dlogback.configurationFile=/dev/null", "-cp", f"{lib}/*", "org.gaul.s3proxy.Main",
             "--properties", str(props)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    (data_dir / PID_FILE).write_text(str(proc.pid))
    (data_dir / ENDPOINT_FILE).write_text(f"http://{host}:{port}")
    deadline = time.monotonic() + timeout
    while not port_open(host, port):
        if proc.poll() is not None:
            raise StoreError(f"the object store exited with code {proc.returncode}; see {log}")
        if time.monotonic() > deadline:
            proc.kill()
            raise StoreError(f"the object store did not answer within {timeout:.0f}s; see {log}")
        time.sleep(0.1)
    return status(data_dir)


def stop(data_dir: Path, timeout: float = 30.0) -> bool:
    """Stop the store of ``data_dir`` (SIGTERM, SIGKILL after ``timeout``); False if none ran."""
    current = status(data_dir)
    if not current.running or current.pid is None:
        return False
    terminate(current.pid, timeout=timeout, poll=0.1)
    (data_dir / PID_FILE).unlink(missing_ok=True)
    return True


def status(data_dir: Path) -> StoreStatus:
    """Whether the store of ``data_dir`` runs."""
    pid_file = data_dir / PID_FILE
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    running = pid is not None and process_alive(pid)
    endpoint = data_dir / ENDPOINT_FILE
    return StoreStatus(running=running, pid=pid if running else None,
                       endpoint=endpoint.read_text() if endpoint.exists() else None, data_dir=data_dir)
