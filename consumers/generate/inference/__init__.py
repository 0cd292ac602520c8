"""The generate stage's server side: the pool and its routing, limits, engines, HTTP, integrity checks.

Nothing here knows Kafka. The loop reaches the servers through :class:`InferenceClient`, built on
a :class:`ServerPool`; ``--concurrency auto`` adds :class:`AutoConcurrency`.
"""

from eaglefeed.consumers.generate.inference.adaptive import AutoConcurrency
from eaglefeed.consumers.generate.inference.affinity import affinity_key
from eaglefeed.consumers.generate.inference.capture import HiddenStatesCapture, probe_capture, wait_for_file
from eaglefeed.consumers.generate.inference.client import InferenceClient, Samples
from eaglefeed.consumers.generate.inference.detect import read_server_info
from eaglefeed.consumers.generate.inference.engines import vllm_sampling_params
from eaglefeed.consumers.generate.inference.http import make_http_client, raise_for_status
from eaglefeed.consumers.generate.inference.integrity import Generation, check_samples
from eaglefeed.consumers.generate.inference.limits import LimitSettings, Load
from eaglefeed.consumers.generate.inference.models import ServerModels
from eaglefeed.consumers.generate.inference.neutral import NEUTRAL, TEXT_ONLY
from eaglefeed.consumers.generate.inference.reach import reach_servers
from eaglefeed.consumers.generate.inference.servers import Server, ServerInfo, ServerPool, describe

__all__ = [
    "NEUTRAL",
    "TEXT_ONLY",
    "AutoConcurrency",
    "Generation",
    "HiddenStatesCapture",
    "InferenceClient",
    "LimitSettings",
    "Load",
    "Samples",
    "Server",
    "ServerInfo",
    "ServerModels",
    "ServerPool",
    "affinity_key",
    "check_samples",
    "describe",
    "make_http_client",
    "probe_capture",
    "raise_for_status",
    "reach_servers",
    "read_server_info",
    "vllm_sampling_params",
    "wait_for_file",
]
