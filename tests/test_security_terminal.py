"""The terminal's nsfc filter against common bypasses: cheap gaps closed, the rest documented.

The filter is defence in depth against an LLM's mistakes, not a boundary:
``$(echo rm) -rf /`` or a variable holding ``/`` will always get through a
pattern list, and docs/security.md says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chatgpt_tool_hub.tools.builtin.terminal import nsfc_check

DOCS = Path(__file__).resolve().parents[1] / "docs" / "security.md"


@pytest.mark.parametrize("command", [
    "echo cm0gLXJmIC8K | base64 -d | sh",
    "echo cm0gLXJmIC8K | base64 --decode | bash",
    "printf 'rm -rf /' | /bin/sh",
    "bash -c \"$(echo cm0gLXJmIC8K | base64 -d)\"",
    "eval \"$(echo cm0gLXJmIC8K | base64 -d)\"",
    "eval `echo cm0gLXJmIC8K | base64 -d`",
    "bash -c 'rm -rf /'",
    "sh -c \"rm -rf /\"",
    "bash -lc 'rm -rf ~'",
    "rm -rf /.",
    "rm -rf /./",
    "rm -rf /usr/../",
    "rm -rf /tmp/../..",
    "find / -delete",
    "find / -name '*' -exec rm -rf {} +",
    "find ~ -type f -delete",
    "cd / && rm -rf *",
    "cd ~; rm -rf ./*",
    "kill -9 -1",
    "kill -KILL -1",
    "kill -s KILL -1",
    "kill -9 1",
    "shred -n 1 /dev/sda",
    "wipefs -a /dev/nvme0n1",
])
def test_common_bypasses_are_refused(command):
    assert nsfc_check(command) is not None, command


@pytest.mark.parametrize("command", [
    "ls | grep sh", "cat install.sh", "bash build.sh", "sh ./configure", "bash -c 'echo hi'",
    "find . -name '*.pyc' -delete", "find build -delete", "kill 12345", "kill -1 12345", "kill -9 4242",
    "echo $(date)", "curl -s x | shasum", "cd /tmp && ls", "cd build && rm -rf *", "rm -rf ./build/..",
    "base64 -d data.b64 > out.bin", "eval echo hi", "echo done | tee log.txt",
])
def test_ordinary_commands_still_pass(command):
    assert nsfc_check(command) is None, command


def test_docs_say_the_filter_is_not_a_boundary():
    text = DOCS.read_text(encoding="utf-8")
    assert "defence in depth" in text and "not a boundary" in text
    assert "$(echo rm)" in text  # the kind of bypass the filter will never catch is named
