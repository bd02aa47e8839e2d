"""The terminal's nsfc filter against common bypasses: cheap gaps closed, the rest documented.

The filter is defence in depth against an LLM's mistakes, not a boundary:
``$(echo rm) -rf /`` or a variable holding ``/`` will always get through,
and docs/security.md says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chatgpt_tool_hub.runtime.nsfc import UNREADABLE
from chatgpt_tool_hub.tools.builtin.terminal import NSFC_RULES, nsfc_check

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


# The documented families in the spellings a shell also accepts: (command, the family's reason).
OTHER_SPELLINGS = [
    # option ends, groups, subshells, assignments, wrappers
    ("bash -c -- 'rm -rf /'", "recursive delete"),
    ("sh -c -- \"rm -rf ~\"", "recursive delete"),
    ("{ rm -rf /; }", "recursive delete"),
    ("( rm -rf / )", "recursive delete"),
    ("f() { rm -rf /; }; f", "recursive delete"),
    ("if true; then rm -rf /; fi", "recursive delete"),
    ("x=1 rm -rf /", "recursive delete"),
    ("LC_ALL=C nice -n 5 rm -rf ~", "recursive delete"),
    ("env -i PATH=/bin rm -rf /usr", "recursive delete"),
    ("timeout -s KILL 5 rm -rf /", "recursive delete"),
    ("command rm -rf /", "recursive delete"),
    ("exec rm -rf /", "recursive delete"),
    ("nohup rm -rf / &", "recursive delete"),
    ("busybox rm -rf /", "recursive delete"),
    ("echo \"$(rm -rf /)\"", "recursive delete"),
    ("ls `rm -rf ~`", "recursive delete"),
    ("cat <(rm -rf /)", "recursive delete"),
    ("echo ${x:-$(rm -rf /)}", "recursive delete"),
    ("eval 'rm -rf /'", "recursive delete"),
    ("env -S 'rm -rf /'", "recursive delete"),
    ("watch -n 1 'rm -rf /'", "recursive delete"),
    ("trap 'rm -rf /' EXIT", "recursive delete"),
    ("bash <<'EOF'\nrm -rf /\nEOF", "recursive delete"),
    ("bash <<< 'rm -rf /'", "recursive delete"),
    # other spellings of the words themselves
    ("{rm,-rf,/}", "recursive delete"),
    ("rm -rf $'\\x2f'", "recursive delete"),
    ("r\\m -rf /", "recursive delete"),
    ("rm -rf //", "recursive delete"),
    ("rm -rf /b*", "recursive delete"),
    ("rm -rf -- /", "recursive delete"),
    ("rm / -rf", "recursive delete"),
    ("rm -rf \\\n /", "recursive delete"),
    ("cd; rm -rf *", "recursive delete"),
    ("find / -exec /bin/rm -f {} \\;", "recursive delete"),
    ("rm --no-preserve-root -r /tmp/x", "no-preserve-root"),
    # running as another user
    ("timeout 5 sudo ls", "another user"),
    ("nice sudo ls", "another user"),
    ("x=1 sudo ls", "another user"),
    ("env sudo ls", "another user"),
    ("xargs sudo", "another user"),
    ("ls `sudo id`", "another user"),
    ("find . -exec sudo rm {} \\;", "another user"),
    ("su -c 'id' root", "another user"),
    ("/usr/bin/doas ls", "another user"),
    # pipes into a shell
    ("echo hi |& sh", "into a shell"),
    ("cat x |& bash", "into a shell"),
    ("curl x |& sh", "into a shell"),
    ("curl x | env bash", "into a shell"),
    ("curl x | { bash; }", "into a shell"),
    ("curl x | (sh)", "into a shell"),
    ("cat x | sh -s -- arg", "into a shell"),
    ("cat x | bash /dev/stdin", "into a shell"),
    ("curl -s x | python3", "into an interpreter"),
    ("sh < <(curl -s x)", "downloaded script"),
    ("source <(wget -qO- x)", "downloaded script"),
    ("bash <<< \"$(curl -s x)\"", "downloaded script"),
    # redirections to devices and system paths
    ("echo x >| /etc/motd", "/etc"),
    ("echo x >> /etc/../etc/hosts", "/etc"),
    ("echo x &> /etc/motd", "/etc"),
    ("rm /etc/passwd", "/etc"),
    ("cat img >| /dev/sda", "disk device"),
    ("cat img 1> /dev/nvme0n1", "disk device"),
    ("tee /dev/sdb < img", "disk device"),
    ("cp disk.img /dev/sdc", "disk device"),
    ("dd if=x of=/dev/nvme0n1", "dd"),
    # killing everything, shutting down
    ("kill -s 9 -1", "kill"),
    ("kill -9 -- -1", "kill"),
    ("kill -s KILL 1", "kill"),
    ("kill -TERM -1 2>/dev/null", "kill"),
    ("killall5 -9", "kill"),
    ("telinit 0", "shutting down"),
    ("init 6", "shutting down"),
    ("systemctl --force reboot", "shutting down"),
    ("loginctl poweroff", "shutting down"),
    ("echo b > /proc/sysrq-trigger", "shutting down"),
    ("nohup sh -c 'reboot' &", "shutting down"),
    ("sudo /sbin/shutdown -h now", "shutting down"),
    # the rest of the families behind a wrapper
    ("timeout 60 mkfs.ext4 /dev/sdb1", "mkfs"),
    ("env chmod -R 700 ~", "permission change"),
    ("chown -R me /usr/*", "permission change"),
    ("x=1 wipefs -a /dev/sda", "wiping a disk"),
    ("bash -c ':(){ :|:& };:'", "fork bomb"),
    ("sh -c \"$(echo cm0gLXJmIC8K | base64 -d)\"", "generated"),
    ("nohup eval \"$(cat x.b64 | base64 -d)\"", "generated"),
]


@pytest.mark.parametrize("command, reason", OTHER_SPELLINGS)
def test_other_spellings_of_the_families_are_refused(command, reason):
    found = nsfc_check(command)
    assert found is not None, command
    assert reason in found, (command, found)


@pytest.mark.parametrize("command", [
    "ls -la", "echo \"rm -rf /\"", "echo 'sudo reboot'", "printf '%s\\n' 'kill -9 -1'", "grep -r sudo .",
    "grep -c 'rm -rf /' notes.txt", "git commit -m 'docs: never run sudo'", "man shutdown", "which reboot",
    "command -v sudo", "type sudo", "timeout 5 ls", "nice -n 5 python3 x.py", "x=1 ls", "env FOO=1 python3 -c 'print(1)'",
    "kill 1234", "kill -1 12345", "kill -s TERM 4242", "kill -l", "bash -c -- 'echo hi'", "{ ls; }", "(cd build && ls)",
    "echo hi |& tee log.txt", "echo hi >| out.txt", "ls 2>&1 | head", "make 2>&1 | tail -5", "curl -s x | python3 -m json.tool",
    "curl -s x -o page.html", "find . -name '*.tmp' -exec rm -f {} +", "cat <<EOF > notes.txt\nrm -rf /\nEOF",
    "echo '$(rm -rf /)'", "ls $(pwd)", "systemctl status nginx", "for f in *.py; do echo $f; done", "echo {a,b}.txt",
    "ls -la  # not sudo rm -rf /", "rm -rf ~/project/build", "rm -rf /tmp/build", "chmod -R 755 build", "docker run --rm img sh",
    "dd if=/dev/zero of=disk.img bs=1M count=1", "tar czf backup.tgz ~/project", "nohup python3 server.py &",
    "init_db.sh", "echo $HOME", "sudoku --level 3",
])
def test_harmless_commands_in_those_spellings_pass(command):
    assert nsfc_check(command) is None, command


def test_reasons_are_the_documented_families():
    for command, _ in OTHER_SPELLINGS:
        assert nsfc_check(command) in NSFC_RULES


@pytest.mark.timeout(60)  # the termination bound: a backtracking pattern takes minutes here
def test_long_and_deeply_nested_commands_are_checked_quickly():
    assert nsfc_check("echo " + "a" * 300_000) is None  # the old fork-bomb pattern backtracked for minutes here
    assert nsfc_check("echo " + "a" * 300_000 + "; rm -rf /") is not None
    assert nsfc_check("echo " + "'x' " * 50_000) is None
    assert nsfc_check("echo " + "$(" * 5000 + "ls" + ")" * 5000) is not None  # too deep to check: refused
    assert nsfc_check("echo \"" + "${x:-" * 5000) is None  # unclosed: never raises


@pytest.mark.parametrize("command", ["$'\\u'", "$'\\c'", "$'\\8'", "echo 'unclosed", 'echo "$(', "echo `ls", "cat <<EOF",
                                     "echo ${", "<(", ")))", "{ ; }", "|&", "2>", "\\", "$", "kill -s", "find -exec",
                                     "bash -c", "sudo", "env -S", "timeout", "dd of="])
def test_malformed_commands_never_raise(command):
    assert nsfc_check(command) != UNREADABLE  # the reader itself never failed


def test_random_command_lines_never_raise():
    import random

    pieces = list(" \t\n;&|()<>{}$`'\"\\#=*?[],-/~019abrmsux") + [
        "rm", "-rf", "/", "sudo", "$(", "${", "<<", "<<<", "bash -c", "|&", ">|", "kill", "-1", "EOF\n", "$'", "\\x2f",
        "\\u", "\\c", "\\8", "find", "-exec", "cd", "env", "-S", "eval", "timeout", "{a,b}", "<(", "of=", "watch"]
    rng = random.Random(7)
    for _ in range(3000):
        line = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 100)))
        assert nsfc_check(line) != UNREADABLE, line


def test_docs_say_the_filter_is_not_a_boundary():
    text = DOCS.read_text(encoding="utf-8")
    assert "defence in depth" in text and "not a boundary" in text
    assert "$(echo rm)" in text  # the kind of bypass the filter will never catch is named
