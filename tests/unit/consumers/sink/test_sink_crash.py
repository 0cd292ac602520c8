"""The test-only crash hook of the sink's commit sequence."""

import pytest

from eaglefeed.consumers.sink.crash import CrashHook


def test_the_crash_hook_only_knows_the_documented_steps():
    with pytest.raises(ValueError, match="unknown crash step"):
        CrashHook("before_everything")
    hook = CrashHook("after_rename:3")
    hook("after_rename")
    hook("after_manifest")
    assert hook.left == 2
    CrashHook(None)("after_rename")  # no spec: never fires
