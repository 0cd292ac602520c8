"""``status`` refuses a topic prefix the cluster has no topic of, and says which prefixes it has."""

from __future__ import annotations

import pytest

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import ConfigError
from eaglefeed.ops.pipeline_status import check_prefix

TOPICS = {"eaglefeed.prompts", "eaglefeed.generations", "blue.prompts", "blue.dead-letter",
          "__consumer_offsets", "other"}


def test_a_prefix_with_topics_passes():
    check_prefix(TOPICS, KafkaConfig())
    check_prefix({"blue.dead-letter"}, KafkaConfig(topic_prefix="blue"))


def test_an_unknown_prefix_names_the_prefixes_the_cluster_has():
    with pytest.raises(ConfigError) as stopped:
        check_prefix(TOPICS, KafkaConfig(topic_prefix="typo"))
    assert "'typo'" in str(stopped.value) and "prefixes there: blue, eaglefeed" in str(stopped.value)
    with pytest.raises(ConfigError, match="none yet"):
        check_prefix({"__consumer_offsets"}, KafkaConfig())
