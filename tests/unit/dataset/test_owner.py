"""One owner (topic and group) per dataset directory."""

import pytest

from eaglefeed.core.errors import ConfigError
from eaglefeed.dataset.owner import OWNER_FILE, claim_output, read_owner


def test_the_first_sink_claims_the_output_and_may_come_back(tmp_path):
    root = tmp_path / "out"
    assert read_owner(root) is None
    claim_output(root, topic="t.generations", group_id="g")
    assert read_owner(root) == {"topic": "t.generations", "group_id": "g"}
    claim_output(root, topic="t.generations", group_id="g")  # a restart of the same sink
    assert [p.name for p in root.iterdir()] == [OWNER_FILE]  # no temp file left behind


@pytest.mark.parametrize(("topic", "group"), [("t.generations", "other"), ("u.generations", "g")])
def test_a_second_owner_is_refused_with_one_clear_line(tmp_path, topic, group):
    claim_output(tmp_path, topic="t.generations", group_id="g")
    owned = r"belongs to the sink of group 'g' on topic 't.generations'"
    with pytest.raises(ConfigError, match=owned) as exc:
        claim_output(tmp_path, topic=topic, group_id=group)
    assert "\n" not in str(exc.value)


def test_an_output_that_is_a_file_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="cannot use .* as the output"):
        claim_output(blocker / "out", topic="t", group_id="g")
