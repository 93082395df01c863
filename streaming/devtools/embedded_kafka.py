"""A real single-node Apache Kafka 4.1 broker for development and tests, run as a child `java`.

`EmbeddedKafka(state_dir)` runs `java -cp <.cache/jars/kafka/*> kafka.Kafka server.properties` in
KRaft combined mode (one process is both broker and controller, node id 1, a static one-voter
quorum); a second `EmbeddedKafka(other_dir, joins=first)` runs a broker only in the first one's
cluster, for tests that take a partition's leader away. Everything lives in `state_dir`:

    server.properties    written at every start (ports may change between starts)
    log4j2.properties    the broker's logging: WARN, plus its start and stop lines
    data/                log.dirs, formatted once (kafka.tools.StorageTool) with a new cluster id
    kafka.pid            the java process id while it runs
    kafka.log            the broker's stdout and stderr, appended to at every start

Both listeners bind 127.0.0.1 only. A secured cluster can be stood in for: with `sasl_users`
(user -> password) the client listener requires SASL/PLAIN, and with `tls=True` it speaks TLS with
a certificate for 127.0.0.1 made at start by the JDK's keytool (`tls/broker.p12`; clients trust
`tls/ca.pem`). `connection(user)` is how a client of that broker connects (the tests of the one
connection setting use it).

Settings chosen for one node and fast tests: replication factor 1
for the internal topics, one partition for `__consumer_offsets`, no initial rebalance delay, new
topics with 1 partition, the log cleaner checking every 0.5 s (so compaction shows quickly).
`brokers=3` (given to the first node; those that join it take it from there) sizes a cluster of
three: the internal topics (`__consumer_offsets`, the transaction state) and topics created by
the broker get three replicas and `min.insync.replicas` 2, so that one broker may stop and leave
groups and transactions working. `embedded_cluster` starts such a cluster.

`auto.create.topics.enable=true`, on purpose: the Spark Kafka sink sends each row to the topic named
in its `topic` column, and a destination (a network address, a service queue) may appear with the
data; the sink cannot create topics, and a missing one would block the producer and fail the query.
Topics that need settings (the compacted `routes` and `catalogs` topics) must be created with
`streaming.kafka.admin.ensure_topics(..., compacted=True)` before anything writes to them.

`start()` waits, with a deadline, until the broker answers an AdminClient metadata request; a broker
already running from the same state dir is left alone and reported as such. `stop()` sends SIGTERM
(a clean shutdown: the broker flushes and closes its logs) and SIGKILL only past a deadline.
"""

from __future__ import annotations

import base64
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from streaming.errors import KafkaUnavailable
from streaming.jars import kafka_broker_classpath
from streaming.jvm_flags import KAFKA_JVM_OPTIONS_ENV, flags_from_env
from streaming.kafka.admin import cluster_metadata
from streaming.kafka.connection import KafkaConnection, jaas_config

HOST = "127.0.0.1"
# `router kafka start` listens here unless told otherwise; docker-compose.yml publishes its broker on
# the same port, so `router` commands work unchanged against either. Tests pick free ports instead.
DEFAULT_PORT = 19092
KAFKA_MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL_CLASS = "kafka.tools.StorageTool"
JVM_OPTIONS = ("-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-Djava.awt.headless=true")
JVM_OPTIONS_ENV = KAFKA_JVM_OPTIONS_ENV
"""More flags for the broker's JVM, separated by spaces, after `JVM_OPTIONS`: the C1-only compiler
the test suite's brokers run with (`tests/conftest.py`), say. Unset: none."""
# The storage formatter runs for a second or two: a quick JIT and a small heap start it faster.
FORMATTER_JVM_OPTIONS = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
NODE_ID = 1
_BROKER_USER = "broker"
_BIND_ATTEMPTS = 3
"""How many times `start` tries new ports when another process took one before the broker bound it."""
_KEYSTORE_PASSWORD = "router-test-only"

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
"""


@dataclass(frozen=True)
class BrokerStatus:
    """What `status()` sees: a running broker has a pid and a bootstrap address."""

    state_dir: Path
    pid: int | None
    bootstrap: str | None
    log_file: Path

    @property
    def running(self) -> bool:
        """True while the broker process of this state dir is alive."""
        return self.pid is not None


@dataclass(frozen=True)
class StartResult:
    """What `start()` did: `already_running` when it found a broker and left it alone."""

    bootstrap: str
    pid: int
    already_running: bool
    seconds: float


@dataclass(frozen=True)
class StopResult:
    """What `stop()` did: `killed` when SIGTERM was not enough within the deadline."""

    was_running: bool
    killed: bool
    seconds: float


def free_port(exclude: frozenset[int] = frozenset()) -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port not in exclude:
            return port


def port_is_free(port: int) -> bool:
    """Return True when a listener could bind `127.0.0.1:port` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _stop_with_parent() -> None:
    """Ask Linux to send the child SIGTERM when its parent dies (runs between fork and exec).

    So a test run killed outright leaves no broker behind. Elsewhere a no-op.
    """
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _property(path: Path, name: str) -> str | None:
    """A setting of a properties file the broker reads or writes; None when the file or it is absent."""
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1]
    return None


def _required(path: Path, name: str) -> str:
    """`_property`, which must be there."""
    value = _property(path, name)
    if value is None:
        raise KafkaUnavailable(f"expected {name} in {path}")
    return value


def new_cluster_id() -> str:
    """Return a KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 characters).

    An id that starts with `-` would be read as an option by kafka-storage's argument parser, so
    such ids (one in 64) are drawn again.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def java_executable() -> str:
    """Return the `java` to run: `$JAVA_HOME/bin/java`, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaUnavailable("expected `java` (a JDK 17) on PATH or in $JAVA_HOME/bin, found neither")
    return found


class EmbeddedKafka:
    """One Kafka broker whose files live in `state_dir` (see the module docstring).

    `port=None` picks a free port at every start; the controller listener always gets a free port.
    As a context manager it starts the broker in the caller's session (Ctrl-C reaches it too) and
    stops it on exit: `with EmbeddedKafka(tmp) as kafka: use(kafka.bootstrap)`.

    `joins`, another EmbeddedKafka that runs, makes this one a broker only (node `node_id`, by
    default 2) in that one's cluster: its controller's quorum and its cluster id. Two brokers are
    what a test needs to take a partition's leader away while the cluster still answers (PLAINTEXT).
    `brokers`, the size of the cluster the first node starts, replicates its internal topics (up to
    3 times; a broker that joins takes the first one's); the default, 1, is a single node's.
    """

    def __init__(
        self,
        state_dir: Path | str,
        port: int | None = None,
        *,
        start_timeout: float = 60.0,
        sasl_users: Mapping[str, str] | None = None,
        tls: bool = False,
        joins: EmbeddedKafka | None = None,
        node_id: int | None = None,
        brokers: int = 1,
    ) -> None:
        self.joins = joins
        if brokers < 1:
            raise ValueError(f"expected a cluster of at least 1 broker, got {brokers}")
        self.brokers: int = joins.brokers if joins is not None else brokers
        """The size of the cluster (the first node's `brokers`): its internal topics' replicas."""
        self.node_id = node_id if node_id is not None else (NODE_ID + 1 if joins is not None else NODE_ID)
        if joins is not None and self.node_id == joins.node_id:
            raise ValueError(f"a broker that joins node {joins.node_id}'s cluster needs another node id")
        self.state_dir = Path(state_dir).expanduser().resolve()
        self.port = port
        self.start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._users = dict(sasl_users or {})
        if self._users:
            # The broker's own user, for the traffic between its listeners and its readiness check.
            self._users.setdefault(_BROKER_USER, uuid.uuid4().hex)
        self.tls = tls
        self.listener = ("SASL_" if self._users else "") + ("SSL" if tls else "PLAINTEXT")
        """The client listener's security protocol."""
        if joins is not None and (self.listener != "PLAINTEXT" or joins.listener != "PLAINTEXT"):
            raise ValueError("a broker that joins another's cluster speaks PLAINTEXT only (no SASL, no TLS)")

    @property
    def ca_file(self) -> Path:
        """The PEM certificate a client trusts to talk TLS to this broker (`tls=True`)."""
        return self.state_dir / "tls" / "ca.pem"

    def connection(self, user: str | None = None) -> KafkaConnection:
        """How a client connects to the running broker: as `user` when it requires SASL."""
        return self._connection(self.bootstrap, user)

    def _connection(self, bootstrap: str, user: str | None) -> KafkaConnection:
        ca = str(self.ca_file) if self.tls else None
        if not self._users:
            return KafkaConnection(bootstrap, security_protocol=self.listener, ssl_ca_location=ca)
        name = user or _BROKER_USER
        if name not in self._users:
            raise KafkaUnavailable(
                f"expected a SASL user of the broker, one of {sorted(self._users)}; got {name!r}"
            )
        return KafkaConnection(
            bootstrap,
            security_protocol=self.listener,
            sasl_mechanism="PLAIN",
            sasl_username=name,
            sasl_password=self._users[name],
            ssl_ca_location=ca,
        )

    # -- files -----------------------------------------------------------------------------------

    @property
    def server_properties(self) -> Path:
        """The broker's configuration, rewritten at every start."""
        return self.state_dir / "server.properties"

    @property
    def data_dir(self) -> Path:
        """log.dirs: the broker's topics and its KRaft metadata log."""
        return self.state_dir / "data"

    @property
    def pid_file(self) -> Path:
        """Holds the java process id while the broker runs."""
        return self.state_dir / "kafka.pid"

    @property
    def log_file(self) -> Path:
        """The broker's stdout and stderr, appended to at every start."""
        return self.state_dir / "kafka.log"

    @property
    def bootstrap(self) -> str:
        """The running broker's bootstrap address; KafkaUnavailable when none runs."""
        status = self.status()
        if status.bootstrap is None:
            raise KafkaUnavailable(f"expected a Kafka broker running from {self.state_dir}, none is")
        return status.bootstrap

    def _write_config(self, port: int, controller_port: int) -> None:
        listener = self.listener
        if self.joins is None:
            roles, voters = "broker,controller", f"{self.node_id}@{HOST}:{controller_port}"
            listeners = f"{listener}://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}"
        else:
            roles, voters = "broker", _required(self.joins.server_properties, "controller.quorum.voters")
            listeners = f"{listener}://{HOST}:{port}"
        settings = {
            "process.roles": roles,
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "listeners": listeners,
            "advertised.listeners": f"{listener}://{HOST}:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": listener,
            "listener.security.protocol.map": f"{listener}:{listener},CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            **self._replication_settings(),
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.backoff.ms": "500",
            "num.network.threads": "2",
            "num.io.threads": "4",
        }
        if self.tls:
            keystore = self._make_certificate()
            settings.update(
                {
                    "ssl.keystore.type": "PKCS12",
                    "ssl.keystore.location": str(keystore),
                    "ssl.keystore.password": _KEYSTORE_PASSWORD,
                    "ssl.key.password": _KEYSTORE_PASSWORD,
                    "ssl.truststore.type": "PEM",
                    "ssl.truststore.location": str(self.ca_file),
                }
            )
        if self._users:
            accepted = {f"user_{name}": password for name, password in self._users.items()}
            settings.update(
                {
                    "sasl.enabled.mechanisms": "PLAIN",
                    "sasl.mechanism.inter.broker.protocol": "PLAIN",
                    f"listener.name.{listener.lower()}.plain.sasl.jaas.config": jaas_config(
                        "PLAIN", _BROKER_USER, self._users[_BROKER_USER], accepted
                    ),
                }
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.server_properties.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        (self.state_dir / "log4j2.properties").write_text(_LOG4J2)

    def _replication_settings(self) -> dict[str, str]:
        """The internal topics' replicas, and those of topics the broker creates: the cluster's size.

        Up to 3, with one fewer in sync (at least 1): one broker of three may stop. A single node
        keeps Kafka's defaults for a topic created without settings (1 replica, 1 in sync).
        """
        factor = min(self.brokers, 3)
        in_sync = str(max(1, factor - 1))
        settings = {
            "offsets.topic.replication.factor": str(factor),
            "transaction.state.log.replication.factor": str(factor),
            "transaction.state.log.min.isr": in_sync,
            "share.coordinator.state.topic.replication.factor": str(factor),
            "share.coordinator.state.topic.min.isr": in_sync,
        }
        if factor > 1:
            settings.update({"default.replication.factor": str(factor), "min.insync.replicas": in_sync})
        return settings

    def _make_certificate(self) -> Path:
        """A self-signed certificate for 127.0.0.1 (a keystore), and its PEM for clients to trust."""
        folder = self.state_dir / "tls"
        keystore = folder / "broker.p12"
        if keystore.is_file() and self.ca_file.is_file():
            return keystore
        folder.mkdir(parents=True, exist_ok=True)
        keytool = str(Path(java_executable()).with_name("keytool"))
        common = ["-alias", "broker", "-keystore", str(keystore), "-storepass", _KEYSTORE_PASSWORD]
        for args in (
            [
                "-genkeypair",
                "-keyalg",
                "RSA",
                "-keysize",
                "2048",
                "-validity",
                "30",
                "-dname",
                f"CN={HOST}",
                "-ext",
                f"SAN=ip:{HOST}",
                "-storetype",
                "PKCS12",
                "-keypass",
                _KEYSTORE_PASSWORD,
            ],
            ["-exportcert", "-rfc", "-file", str(self.ca_file)],
        ):
            done = subprocess.run([keytool, *args, *common], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise KafkaUnavailable(
                    f"keytool could not make the broker's certificate: {done.stderr.strip()}"
                )
        return keystore

    def _read_port(self) -> int | None:
        """The PLAINTEXT port of the last written server.properties."""
        listeners = _property(self.server_properties, "advertised.listeners")
        return int(listeners.rsplit(":", 1)[1]) if listeners is not None else None

    def _java_command(self, jvm_options: tuple[str, ...], main_class: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(jar) for jar in kafka_broker_classpath())
        log4j = self.state_dir / "log4j2.properties"
        return [
            java_executable(),
            *jvm_options,
            f"-Dlog4j2.configurationFile={log4j}",
            # Kafka's own shutdown hook logs its clean stop; log4j's hook would close the log first.
            "-Dlog4j2.shutdownHookEnabled=false",
            "-cp",
            classpath,
            main_class,
            *args,
        ]

    # -- process ---------------------------------------------------------------------------------

    def _read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _alive(self, pid: int) -> bool:
        """True while `pid` is a live (not zombie) process; reaps it when it is our exited child."""
        if self._process is not None and self._process.pid == pid:
            return self._process.poll() is None
        try:
            reaped, _ = os.waitpid(pid, os.WNOHANG)
            if reaped == pid:
                return False
        except ChildProcessError:
            pass
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.is_file():
            try:
                return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
            except (OSError, IndexError):
                return False
        return True

    def _is_our_broker(self, pid: int) -> bool:
        """True when `pid` is alive and (where /proc shows it) runs kafka.Kafka on our properties."""
        if not self._alive(pid):
            return False
        cmdline = Path(f"/proc/{pid}/cmdline")
        if not cmdline.is_file():
            return True
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            return False
        return KAFKA_MAIN_CLASS.encode() in args and str(self.server_properties).encode() in args

    def status(self) -> BrokerStatus:
        """Return whether the broker of this state dir runs, its pid and bootstrap address."""
        pid = self._read_pid()
        if pid is None or not self._is_our_broker(pid):
            return BrokerStatus(self.state_dir, None, None, self.log_file)
        port = self._read_port()
        bootstrap = f"{HOST}:{port}" if port is not None else None
        return BrokerStatus(self.state_dir, pid, bootstrap, self.log_file)

    def _log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_file.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def _format_storage(self) -> None:
        """Format `data/` once; a formatted dir (it has meta.properties) is kept with its topics."""
        if (self.data_dir / "meta.properties").is_file():
            return
        command = self._java_command(
            FORMATTER_JVM_OPTIONS,
            STORAGE_TOOL_CLASS,
            "format",
            "--config",
            str(self.server_properties),
            "--cluster-id",
            (
                _required(self.joins.data_dir / "meta.properties", "cluster.id")
                if self.joins is not None
                else new_cluster_id()
            ),
            "--ignore-formatted",
        )
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired as exc:
            raise KafkaUnavailable(
                f"formatting the Kafka storage in {self.data_dir} took over 120 s"
            ) from exc
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip().splitlines()[-20:]
            raise KafkaUnavailable(
                f"expected {STORAGE_TOOL_CLASS} to format {self.data_dir}, "
                f"it exited {result.returncode}:\n" + "\n".join(output)
            )

    def start(self, *, detach: bool = True) -> StartResult:
        """Start the broker and wait until it answers; leave a running one alone.

        `detach=True` (the CLI) puts the broker in its own session so that it outlives the caller;
        `detach=False` (the context manager) keeps it in the caller's, so Ctrl-C stops it too, and
        (on Linux) the broker gets SIGTERM when the caller dies, even by SIGKILL.
        """
        started = time.monotonic()
        status = self.status()
        if status.running and status.pid is not None and status.bootstrap is not None:
            return StartResult(status.bootstrap, status.pid, already_running=True, seconds=0.0)
        self.pid_file.unlink(missing_ok=True)

        for attempt in range(1, _BIND_ATTEMPTS + 1):
            port = self.port if self.port is not None else free_port()
            if not port_is_free(port):
                raise KafkaUnavailable(
                    f"expected port {port} on {HOST} to be free for the Kafka broker, something listens "
                    "there (another broker? `router kafka status`, or pick another with --port)"
                )
            controller_port = free_port(exclude=frozenset({port}))
            pid, bootstrap = self._launch(port, controller_port, detach)
            try:
                self._wait_until_ready(pid, port, bootstrap)
                break
            except KafkaUnavailable as exc:
                # A port found free can be taken by another process before the broker binds it
                # (tests start brokers side by side): try again on new ones.
                if "Address already in use" not in str(exc) or attempt == _BIND_ATTEMPTS:
                    raise
        return StartResult(bootstrap, pid, already_running=False, seconds=time.monotonic() - started)

    def _launch(self, port: int, controller_port: int, detach: bool) -> tuple[int, str]:
        """Write the config, format the storage once, start the java process; its pid and bootstrap."""
        jvm_options = (*JVM_OPTIONS, *flags_from_env(JVM_OPTIONS_ENV))  # refused before anything is written
        self._write_config(port, controller_port)
        self._format_storage()
        command = self._java_command(jvm_options, KAFKA_MAIN_CLASS, str(self.server_properties))
        with self.log_file.open("ab") as log:
            log.write(f"=== router: starting Kafka on {HOST}:{port} at {time.ctime()} ===\n".encode())
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                start_new_session=detach,
                preexec_fn=None if detach else _stop_with_parent,
            )
        pid = self._process.pid
        self.pid_file.write_text(f"{pid}\n")
        return pid, f"{HOST}:{port}"

    def _wait_until_ready(self, pid: int, port: int, bootstrap: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            if not self._alive(pid):
                self.pid_file.unlink(missing_ok=True)
                raise KafkaUnavailable(
                    f"the Kafka broker exited while starting; the end of {self.log_file}:\n{self._log_tail()}"
                )
            if _accepts_connections(port):
                try:
                    # Ready once the cluster's metadata names this node: a joining broker answers
                    # with the first one's metadata before it has registered itself.
                    brokers = cluster_metadata(self._connection(bootstrap, None), timeout=2.0).brokers
                    if self.node_id in brokers:
                        return
                except KafkaUnavailable:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise KafkaUnavailable(
                    f"expected the Kafka broker to answer at {bootstrap} within {self.start_timeout:g} s, "
                    f"it did not (stopped it); the end of {self.log_file}:\n{self._log_tail()}"
                )
            time.sleep(0.1)

    def stop(self, timeout: float = 30.0) -> StopResult:
        """Stop the broker: SIGTERM, wait up to `timeout` s, then SIGKILL. No broker: nothing to do."""
        started = time.monotonic()
        status = self.status()
        if status.pid is None:
            self.pid_file.unlink(missing_ok=True)
            return StopResult(was_running=False, killed=False, seconds=0.0)
        pid = status.pid
        killed = False
        os.kill(pid, signal.SIGTERM)
        if not self._wait_for_exit(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            killed = True
            if not self._wait_for_exit(pid, 10.0):
                raise KafkaUnavailable(f"the Kafka broker (pid {pid}) survived SIGKILL for 10 s")
        self.pid_file.unlink(missing_ok=True)
        self._process = None
        return StopResult(was_running=True, killed=killed, seconds=time.monotonic() - started)

    def _wait_for_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._alive(pid):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    # -- context manager -------------------------------------------------------------------------

    def __enter__(self) -> EmbeddedKafka:
        self.start(detach=False)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


@contextmanager
def embedded_cluster(state_dir: Path | str, brokers: int = 3) -> Iterator[list[EmbeddedKafka]]:
    """A cluster of `brokers` embedded brokers, started in the caller's session and stopped at the end.

    Node 1 (`state_dir/node1`) is a broker and the cluster's one KRaft controller (a quorum of one
    voter); nodes 2.. are brokers that join it, started together once it runs. Each keeps its port
    for life, so that one stopped and started again comes back where its clients knew it. The
    internal topics are replicated on up to three of them (`EmbeddedKafka`'s `brokers`). The
    brokers stop before the controller.
    """
    folder = Path(state_dir)
    ports: set[int] = set()
    with ExitStack() as stack:
        first = EmbeddedKafka(folder / "node1", port=_new_port(ports), brokers=brokers)
        stack.callback(first.stop)
        first.start(detach=False)
        joining: list[tuple[EmbeddedKafka, int]] = []
        for n in range(2, brokers + 1):
            port = _new_port(ports)
            node = EmbeddedKafka(folder / f"node{n}", port=port, joins=first, node_id=n)
            stack.callback(node.stop)
            joining.append((node, port))
        # Side by side: each takes 5-15 s to start, most of it its JVM's own work.
        launched = [(node, port, node._launch(port, free_port(), detach=False)) for node, port in joining]
        for node, port, (pid, bootstrap) in launched:
            node._wait_until_ready(pid, port, bootstrap)
        yield [first, *(node for node, _ in joining)]


def _new_port(taken: set[int]) -> int:
    """A free port not in `taken`, added to it."""
    port = free_port(exclude=frozenset(taken))
    taken.add(port)
    return port
