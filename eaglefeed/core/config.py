"""Immutable run configuration: every default, declared once; the only module that reads the environment.

Every default lives here, as a field default of a config dataclass or as a ``DEFAULT_*`` constant
at the bottom; the CLI's flags, their ``--help`` and their ``EAGLEFEED_<COMMAND>_<FLAG>`` variables
(``EAGLEFEED_<FLAG>`` for the :data:`PIPELINE_WIDE_ENV` ones) derive from them
(``eaglefeed.cli._parser`` applies the variables; a flag on the command line wins).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from eaglefeed.core.capture import CaptureSettings
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.mixes import SamplingMix
from eaglefeed.core.tokenizer import tokenizer_model
from eaglefeed.core.urls import check_server_url

ENV_PREFIX = "EAGLEFEED_"
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
TURNS = ("last", "all")  # PromptSettings.turns
SAMPLES_MODES = ("separate", "n")  # WorkerConfig.samples_mode
ON_CAPPED = ("keep", "dead-letter")  # WorkerConfig.on_capped
ENGINE_NAMES = ("sglang", "vllm")  # the engines the worker speaks (consumers/generate/inference/engines.py)
ENGINE_CHOICES = ("auto", *ENGINE_NAMES)  # WorkerConfig.engine
HISTORY_CHOICES = ("original", "rerender", "tokens")  # PromptSettings.history
# The pipeline-wide variables (without prefix): every command with the setting reads the same name,
# because every stage of one pipeline must agree on them (where the broker is, how the topics are
# named, how clients authenticate, where caches live, how much is logged). Every other setting is
# one command's own: ``EAGLEFEED_<COMMAND>_<FLAG>`` (eaglefeed.cli._env_names).
PIPELINE_WIDE_ENV = (
    "BOOTSTRAP_SERVERS", "TOPIC_PREFIX", "CONNECT_TIMEOUT",
    "SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD",
    "SSL_CAFILE", "SSL_CERTFILE", "SSL_KEYFILE", "SSL_CHECK_HOSTNAME",
    "CACHE_DIR", "LOG_LEVEL", "METRICS_HOST",
    "TRUST_REMOTE_CODE",  # a property of the target model's tokenizer, the same for every stage
    "CONFIG",  # the --config file: one file holds every command's settings
)
# Variables that belong to no flag: the sink's test-only crash hook and the test and bench harnesses'.
OTHER_ENV = ("SINK_CRASH_AT", "ENGINE_VENV", "VLLM_START_TIMEOUT", "RELIABILITY_SOAK", "MIRROR_DIR")


def env_default(name: str, default: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """Return ``EAGLEFEED_<name>`` from the environment, or ``default`` when it is unset.

    Args:
        name: the variable name without prefix, e.g. ``BOOTSTRAP_SERVERS``.
        default: the value to use when the variable is absent or empty.
        environ: the environment to read (``os.environ`` when omitted).
    """
    value = (os.environ if environ is None else environ).get(ENV_PREFIX + name)
    return value if value else default


def env_lookup(names: Sequence[str], environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """Return ``(variable, value)`` of the first ``EAGLEFEED_<name>`` of ``names`` that is set, or None.

    Args:
        names: variable names without prefix, most specific first.
        environ: the environment to read (``os.environ`` when omitted).
    """
    for name in names:
        value = env_default(name, None, environ)
        if value is not None:
            return ENV_PREFIX + name, value
    return None


def set_variables(environ: Mapping[str, str] | None = None) -> list[str]:
    """The names (without prefix) of every ``EAGLEFEED_*`` variable that is set and not empty.

    Args:
        environ: the environment to read (``os.environ`` when omitted).
    """
    env = os.environ if environ is None else environ
    return sorted(k[len(ENV_PREFIX):] for k, v in env.items() if k.startswith(ENV_PREFIX) and v)


def parse_bool(text: str) -> bool:
    """Read an on/off setting: 1/true/yes/on or 0/false/no/off, in any case.

    Raises:
        ValueError: for any other text.
    """
    word = text.strip().lower()
    if word in TRUE_WORDS or word in FALSE_WORDS:
        return word in TRUE_WORDS
    raise ValueError(f"expected one of {'/'.join(TRUE_WORDS)} or {'/'.join(FALSE_WORDS)}")


def metrics_host(environ: Mapping[str, str] | None = None) -> str:
    """The address /metrics endpoints bind to: loopback unless ``EAGLEFEED_METRICS_HOST`` says otherwise."""
    return env_default("METRICS_HOST", DEFAULT_METRICS_HOST, environ) or DEFAULT_METRICS_HOST


def read_secret(value: str | None) -> str | None:
    """Resolve a secret given inline or as ``@/path/to/file`` (the file's stripped contents)."""
    if value and value.startswith("@"):
        try:
            return Path(value[1:]).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"cannot read secret file {value[1:]!r}: {exc}") from exc
    return value


STALL_SECONDS = 60.0
"""The default ``--stall-seconds`` of every consuming stage (see ``eaglefeed.core.watchdog``):
longer than a rebalance that waits out a dead member's session (20 s)."""


@dataclass(frozen=True)
class KafkaConfig:
    """Where the broker is, how our topics are named, and how clients authenticate (SASL/TLS)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = "eaglefeed"
    client_id: str = "eaglefeed"
    security_protocol: str = "PLAINTEXT"  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    sasl_mechanism: str | None = None  # SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None  # PEM CA bundle that signed the broker's certificate (None: system CAs)
    ssl_certfile: str | None = None  # PEM client certificate, for brokers that require mutual TLS
    ssl_keyfile: str | None = None  # PEM private key of ssl_certfile
    ssl_check_hostname: bool = True
    # Seconds a client keeps trying to reach the broker when it starts, then the stage stops with
    # one line naming the address. Long enough to ride out a broker restart (a local KRaft broker
    # is back in 5-20 s), short enough that a mistyped address is reported within a minute; raise
    # it when stages are started before their broker (kafka-python alone gives up after 30 s).
    connect_timeout: float = 60.0

    @property
    def prompts_topic(self) -> str:
        """Topic of PromptRecords."""
        return f"{self.topic_prefix}.prompts"

    @property
    def generations_topic(self) -> str:
        """Topic of GenerationRecords."""
        return f"{self.topic_prefix}.generations"

    @property
    def dead_letter_topic(self) -> str:
        """Topic of DeadLetterRecords."""
        return f"{self.topic_prefix}.dead-letter"

    @property
    def redriven_topic(self) -> str:
        """Compacted topic of re-drive markers: which dead letters ``dead-letters --redrive`` re-drove."""
        return f"{self.topic_prefix}.redriven"

    @property
    def conversations_topic(self) -> str:
        """Topic of ConversationEvents (started, turn, ended) of regenerated conversations."""
        return f"{self.topic_prefix}.conversations"

    def default_group(self, stage: str) -> str:
        """A stage's default consumer group: ``<topic prefix>-<stage>`` (``eaglefeed-generate`` by default).

        Following the prefix keeps two pipelines on one cluster out of each other's groups.
        """
        return f"{self.topic_prefix}-{stage}"


@dataclass(frozen=True)
class SamplingDefaults:
    """Sampling parameters stamped on every prompt unless a file or row overrides them.

    They are always sent explicitly (and recorded with every prompt and row), so a server's own
    defaults never decide them. ``eaglefeed produce`` takes temperature, top_p, top_k and min_p
    from the model's ``generation_config.json`` when it lies beside the tokenizer
    (``eaglefeed.chat.sampling.model_sampling``); these field defaults are the neutral values
    used without one: the model's own distribution, unfiltered (what SGLang and vLLM do with no
    generation config: temperature 1, top_p 1, top_k -1 meaning every token, min_p 0).
    """

    max_new_tokens: int = 2048
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int = 0
    stop_token_ids: tuple[int, ...] = ()

    def as_params(self) -> dict[str, Any]:
        """The parameters as a PromptRecord's ``sampling_params`` (stop ids as a list)."""
        return {**asdict(self), "stop_token_ids": list(self.stop_token_ids)}


@dataclass(frozen=True)
class PromptSettings:
    """What the producer makes of each row: picklable and free of Kafka settings (and so of secrets).

    Its render processes receive it; the progress ledger keys a run by all of it but ``skip_done``.
    """

    tokenizer: str  # the target model's tokenizer (path or hub id), whose chat template renders
    samples: int = 1
    sampling: SamplingDefaults = field(default_factory=SamplingDefaults)
    chat_template_kwargs: Mapping[str, object] = field(default_factory=dict)
    max_prompt_tokens: int = 32768
    turns: str = "last"  # "last": up to the last user turn; "all": one prompt per assistant turn
    skip_done: Path | None = None  # a sink dataset whose finished prompts are skipped
    # "original": the dataset's own assistant turns are the history (--turns decides the prompts); "rerender"
    # or "tokens": each conversation's first prompt, continued by `eaglefeed converse` (docs/CONVERSATIONS.md)
    history: str = "original"
    max_turns: int = 16  # conversation modes: assistant turns generated per conversation at most
    # run the tokenizer's own Python code (Kimi's auto_map class); changes no other tokenizer's ids,
    # so the progress ledger is not keyed by it
    trust_remote_code: bool = False
    # Identical prompts (same messages, tools, turn and settings) are one prompt whatever their rows'
    # ids; True makes the row's id (its line number when it has none) part of the prompt id.
    keep_duplicates: bool = False
    # conversation modes: how `eaglefeed converse` reads tool calls out of the turns ("auto": from the
    # tokenizer); recorded in each conversation's state, it changes no prompt, so no ledger key
    tool_format: str = "auto"
    # --temperature-cycle / --template-kwargs-cycle: each row draws its entry from its source identity
    mix: SamplingMix = field(default_factory=SamplingMix)
    # --model: the model the prompts are for, which the workers' servers must serve; None: what the
    # tokenizer names (core.tokenizer.tokenizer_model); "": unknown, any server's is taken
    model: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokenizer", tokenizer_reference(self.tokenizer))
        _check_choice("turns", self.turns, TURNS)
        _check_choice("history", self.history, HISTORY_CHOICES)
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, not {self.max_turns}")
        if self.history != "original" and self.turns == "all":
            raise ConfigError("--turns all makes one prompt per turn from the dataset's own answers; "
                              "with --history rerender or tokens the turns come from the model: drop --turns")

    @property
    def conversations(self) -> bool:
        """Whether whole conversations are regenerated (``--history rerender`` or ``tokens``)."""
        return self.history != "original"

    @property
    def prompt_model(self) -> str | None:
        """The model the prompts name: ``--model``, else the one the tokenizer names (None: unknown)."""
        return (tokenizer_model(self.tokenizer) if self.model is None else self.model) or None


@dataclass(frozen=True)
class ProducerConfig:
    """Settings of ``eaglefeed produce``: where prompts go, how inputs are read, what prompts are made."""

    kafka: KafkaConfig
    inputs: tuple[str, ...]
    prompts: PromptSettings
    partitions: int = 6
    strict: bool = False
    metrics_port: int | None = None
    follow: bool = False  # keep watching the inputs for new lines and files
    state_dir: Path | None = None  # the ledger folder (None: none, or producer_state_dir() if following)
    restart: bool = False  # forget the progress ledger and publish every input again
    allow_mixed: bool = False  # publish although the prompts topic holds another tokenizer's prompts
    poll_interval: float = 1.0
    settle_seconds: float = 5.0  # --follow: a file must be this quiet before a partial line is read
    workers: int = 0  # render processes; 0 renders in the producer process
    batch_size: int = 256  # rows rendered and tokenized together
    progress: bool = False  # draw a progress bar on stderr
    # where the sampling defaults came from (the model's generation_config.json, or neutral) and the
    # sampling mix, if any: logged when the run starts, once Kafka answered (errors stay one line)
    sampling_note: str = ""


@dataclass(frozen=True)
class WorkerConfig:
    """Settings of ``eaglefeed generate``."""

    kafka: KafkaConfig
    sglang_urls: tuple[str, ...]
    group_id: str = ""  # "": the prefix's default group (KafkaConfig.default_group("generate"))
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    api_key: str | None = field(default=None, repr=False)
    concurrency: int | None = None  # sequences in flight over all servers; None: auto, per server
    request_timeout: float = 600.0
    max_attempts: int = 5
    commit_interval: float = 1.0
    exit_when_idle: float | None = None
    stall_seconds: float | None = STALL_SECONDS  # watchdog; None or 0: off
    metrics_port: int | None = None
    samples_mode: str = "separate"  # "separate": one request per sample; "n": one request with n
    vocab_size: int | None = None  # bound for output ids; None: from the record's tokenizer
    check_vocab: bool = True
    trust_remote_code: bool = False  # the vocabulary check may run a tokenizer's own code
    exactly_once: bool = False
    transaction_deadline: float = 30.0  # --exactly-once: seconds before a transaction is given up (in doubt)
    drain_seconds: float = 30.0
    retry_backoff: float = 0.5
    retry_backoff_max: float = 30.0
    eject_after: int = 3
    probe_interval: float = 2.0
    session_timeout: float | None = None  # seconds; None: eaglefeed.core.kafka's default
    settle_seconds: float = 5.0  # a new partition waits until the assignment stayed unchanged this long
    durable_index: int = 200_000  # prompts whose durable generations are remembered (and never redone)
    generation_schema_version: int | None = None  # GenerationRecord version written; None: newest
    engine: str = "auto"  # "sglang", "vllm", or "auto": detected per server from its info routes
    progress_seconds: float = 10.0  # a progress line (done, rate, lag, ETA) this often; 0: none
    # a sample the engine cut below max_new_tokens (context, KV cache, a server-wide limit):
    # "keep" it as a row that records the cap (capped_at), or "dead-letter" it with the cap named.
    # Keep by default: the ids are still the engine's exact output, only shorter than asked, and
    # the row says so; dropping them would lose real data over a setting of the server.
    on_capped: str = "keep"
    # 1 prompt in N is re-tokenized by every server in rotation (its /tokenize) and compared with
    # the prompts' tokenizer during the run, besides the start-up probes; 0: never. Cheap: one
    # small request per server per N prompts.
    tokenizer_spot_check: int = 1000
    # conversation affinity: every turn of a conversation goes to one server (its prefix cache holds
    # the earlier turns) unless that server has more than this x the mean outstanding requests; 0: off
    affinity_load: float = 1.25
    capture: CaptureSettings | None = None  # --hidden-states: the target's states from the same pass

    @property
    def max_poll_records(self) -> int:
        """Records one poll may return: twice the concurrency, at most 500 (auto: 500)."""
        return min(2 * self.concurrency, 500) if self.concurrency is not None else 500

    def __post_init__(self) -> None:
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"--concurrency must be 'auto' or at least 1, not {self.concurrency}")
        if self.affinity_load < 0 or (0 < self.affinity_load < 1):
            raise ConfigError(f"--affinity-load must be 0 (off) or at least 1, not {self.affinity_load}")
        _check_choice("samples_mode", self.samples_mode, SAMPLES_MODES)
        if self.capture is not None and self.samples_mode == "n":
            raise ConfigError("--hidden-states needs --samples-mode separate: vLLM writes a file per request")
        _check_choice("on_capped", self.on_capped, ON_CAPPED)
        if self.tokenizer_spot_check < 0:
            raise ConfigError("--tokenizer-spot-check must be 0 (off) or a count of prompts, not "
                              f"{self.tokenizer_spot_check}")
        _check_choice("engine", self.engine, ENGINE_CHOICES)
        for url in self.sglang_urls:
            check_server_url(url)
        if not self.transaction_deadline > 0:
            raise ConfigError(f"--transaction-deadline must be above 0 seconds, "
                              f"not {self.transaction_deadline}")
        if not self.group_id:
            object.__setattr__(self, "group_id", self.kafka.default_group("generate"))


@dataclass(frozen=True)
class SinkConfig:
    """Settings of ``eaglefeed sink``."""

    kafka: KafkaConfig
    output: Path
    group_id: str = ""  # "": the prefix's default group (KafkaConfig.default_group("sink"))
    group_instance_id: str | None = None  # static membership: a restart gets its partitions back at once
    session_timeout: float | None = None  # seconds; None: eaglefeed.core.kafka's default
    flush_rows: int = 10000  # a partition's segment rolls at this many records ...
    flush_bytes: int = 16 * 1024 * 1024  # ... or this many buffered message bytes ...
    flush_seconds: float = 30.0  # ... or when its oldest buffered record is this old
    max_buffer_bytes: int = 48 * 1024 * 1024  # all partitions together: flush the largest beyond it
    exit_when_idle: float | None = None
    stall_seconds: float | None = STALL_SECONDS  # watchdog; None or 0: off
    metrics_port: int | None = None
    progress_seconds: float = 10.0  # a progress line (done, rate, lag, ETA) this often; 0: none
    crash_at: str | None = None  # test-only: EAGLEFEED_SINK_CRASH_AT=STEP[:N] SIGKILLs the sink there
    # the generate workers' group, whose lag on the prompts topic holds --exit-when-idle back
    # ("": the prefix's default group, KafkaConfig.default_group("generate"))
    upstream_group: str = ""

    def __post_init__(self) -> None:
        if not self.group_id:
            object.__setattr__(self, "group_id", self.kafka.default_group("sink"))
        if not self.upstream_group:
            object.__setattr__(self, "upstream_group", self.kafka.default_group("generate"))


@dataclass(frozen=True)
class ConverseConfig:
    """Settings of ``eaglefeed converse``: generations of conversation prompts → the next prompts."""

    kafka: KafkaConfig
    group_id: str = ""  # "": the prefix's default group (KafkaConfig.default_group("converse"))
    tokenizer: str | None = None  # None: each record's own tokenizer_id (checked against its hash)
    # how tool calls are parsed out of regenerated turns; "auto": what the producer recorded, else
    # what the tokenizer's vocab and template tell
    tool_format: str = "auto"
    trust_remote_code: bool = False  # run a tokenizer's own Python code (Kimi's auto_map class)
    max_prompt_tokens: int = PromptSettings.max_prompt_tokens  # a longer next prompt ends the lane
    exit_when_idle: float | None = None
    stall_seconds: float | None = STALL_SECONDS  # watchdog; None or 0: off
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        if self.tokenizer:
            object.__setattr__(self, "tokenizer", tokenizer_reference(self.tokenizer))
        if not self.group_id:
            object.__setattr__(self, "group_id", self.kafka.default_group("converse"))


def tokenizer_reference(name: str) -> str:
    """A tokenizer as records name it: the absolute path of an existing local directory, else ``name``.

    Workers and converse members load a record's ``tokenizer_id`` from their own working
    directory, so a relative path would not find it there; a hub id stays as given. Prompt ids
    never change with it: they depend on the tokenizer's files (``tokenizer_hash``), not its name.
    """
    path = Path(name)
    return str(path.absolute()) if path.is_dir() else name


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, not {value!r}")


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where downloaded artifacts (the Kafka jars) are cached: ``EAGLEFEED_CACHE_DIR`` or the default."""
    return Path(env_default("CACHE_DIR", None, environ) or DEFAULT_CACHE_DIR)


def producer_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where ``produce`` keeps its progress ledgers by default: ``produce/`` in the cache dir.

    A fixed place, not the working directory: the same inputs (absolute paths) with the same
    settings find the same ledger from any directory. Losing it costs re-reading the inputs,
    never a row (prompt ids dedupe what was published).
    """
    return cache_dir(environ) / "produce"


# Defaults of settings that have no config dataclass (the dataclasses' own are their field defaults).
DEFAULT_SGLANG_URL = "http://127.0.0.1:30000"
DEFAULT_BROKER_PORT = 9092
DEFAULT_BROKER_DIR = ".eaglefeed/broker"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "eaglefeed"
DEFAULT_LOG_LEVEL = "info"
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_DEMO_OUTPUT = "demo-data"
DEFAULT_DEMO_DIR = ".eaglefeed/demo"
DEFAULT_STATUS_INTERVAL = 2.0
DEFAULT_INTERACTIVE_CONNECT_TIMEOUT = 5.0  # status, dead-letters: a person waits for them
DEFAULT_COMPACT_TARGET_BYTES = 256 * 1024 * 1024
DEFAULT_STORE_GRACE_SECONDS = 3600.0
"""How long an object store keeps a file compacted away, for readers on other hosts."""
