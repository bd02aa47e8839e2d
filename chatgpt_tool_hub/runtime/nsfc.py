"""The terminal's nsfc ("not safe for computer") filter: a tripwire, not a sandbox.

:func:`nsfc_check` splits a command line into simple commands with
:mod:`.shellwords` and looks at each command word the way the shell would
find it: after ``x=1`` assignments, behind wrappers (``sudo``, ``env``,
``timeout 5``, ``nice -n 5``, ``nohup``, ``command``, ``exec``, ``xargs``,
``setsid``, ``stdbuf`` …), inside ``{ …; }`` groups, ``( … )`` subshells,
``$( … )``, backticks and ``<( … )``, and inside the strings that
``bash -c``, ``sh -c --``, ``eval``, ``su -c``, ``env -S``, ``watch``,
``trap`` and ``find -exec`` run, and the here-documents a shell reads. Each
command is then matched against the families in :data:`NSFC_RULES`.

What it never sees: variables (``x=/; rm -rf $x``), a command word that is
itself computed (``$(echo rm) -rf /``), arguments that arrive at run time
(``xargs``), scripts written to a file and run, and code inside an
interpreter (``python3 -c 'import shutil; shutil.rmtree("/")'``).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from .shellwords import Command, Word, split_commands

__all__ = ["nsfc_check", "NSFC_RULES"]

RM_ROOT = "recursive delete of the root, home or a system folder"
NO_PRESERVE_ROOT = "rm with --no-preserve-root"
MKFS = "formatting a file system (mkfs)"
DD_DEVICE = "writing a raw device with dd"
FORK_BOMB = "a fork bomb"
SHUTDOWN = "shutting down or rebooting the machine"
CHMOD_ROOT = "a recursive permission change of the root or a system folder"
DISK_WRITE = "writing to a disk device"
DISK_WIPE = "wiping a disk device"
DOWNLOAD_SHELL = "piping a download into a shell"
DOWNLOAD_INTERPRETER = "piping a download into an interpreter"
DOWNLOADED_SCRIPT = "running a downloaded script"
ETC_WRITE = "writing to /etc"
OTHER_USER = "running as another user (sudo/su)"
PIPE_SHELL = "piping text into a shell"
GENERATED = "running generated or decoded text (eval, sh -c $(...))"
KILL_ALL = "killing every process (kill -1) or init (kill 1)"
TOO_DEEP = "commands nested too deeply to check"
UNREADABLE = "a command line the filter cannot read"

#: the reasons the filter gives, one per family of refused commands
NSFC_RULES: tuple[str, ...] = (RM_ROOT, NO_PRESERVE_ROOT, MKFS, DD_DEVICE, FORK_BOMB, SHUTDOWN, CHMOD_ROOT,
                               DISK_WRITE, DISK_WIPE, DOWNLOAD_SHELL, DOWNLOAD_INTERPRETER, DOWNLOADED_SCRIPT,
                               ETC_WRITE, OTHER_USER, PIPE_SHELL, GENERATED, KILL_ALL, TOO_DEEP, UNREADABLE)

MAX_DEPTH = 8
_FUNCTION = re.compile(r"(?<![\w:])(\w+|:)\s*\(\)\s*\{")  # "name() {": a match starts only at a name's start
_SYSTEM = re.compile(r"bin|boot|dev|etc|home|lib\w*|opt|proc|root|sbin|srv|sys|usr|var")
_GLOB = re.compile(r"[*?\[]")
_DISK = re.compile(r"/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk|md|dm-|mapper/|loop)")
_SAFE_DEVICES = re.compile(r"/dev/(?:null|zero|full|stdout|stderr|tty|fd/\d+)$")
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(?:\[[^]]*\])?\+?=")
_RECURSIVE = re.compile(r"-[a-zA-Z]*[rR][a-zA-Z]*|--recursive")
_CAPITAL_R = re.compile(r"-[a-zA-Z]*R[a-zA-Z]*|--recursive")
_SHELLS = {"sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "csh", "tcsh", "fish", "yash", "posh"}
_INTERPRETER = re.compile(r"python[\d.]*|perl|ruby|node|nodejs|php[\d.]*")
_CODE_FLAGS = {"-c", "-m", "-e", "-E", "-r", "-n", "-p"}  # the code comes from the command line, not stdin
_DOWNLOADERS = {"curl", "wget", "fetch"}
_USER_SWITCHERS = {"sudo", "doas", "su", "pkexec", "runuser"}
_KEYWORDS = {"!", "if", "then", "else", "elif", "while", "until", "do", "coproc"}
_DATA_KEYWORDS = {"for", "case", "select", "function", "[[", "[", "test", "fi", "done", "esac", "in"}
_ETC_WRITERS = {"tee", "touch", "truncate", "rm", "rmdir", "unlink", "shred", "chmod", "chown", "chgrp", "mkdir"}
_COPIERS = {"cp", "mv", "install", "ln", "rsync"}
_WIPERS = {"shred", "wipefs", "blkdiscard", "sgdisk", "sfdisk", "fdisk", "parted", "mkswap", "cfdisk", "gdisk"}
_POWER_VERBS = {"poweroff", "reboot", "halt", "kexec", "soft-reboot"}
# wrapper -> (options that take a value, positional arguments before the command)
_WRAPPERS: dict[str, tuple[set[str], int]] = {
    "sudo": ({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-R", "-T"}, 0),
    "doas": ({"-u", "-C"}, 0), "pkexec": ({"--user"}, 0), "runuser": ({"-u", "-g", "-G", "-s", "-w"}, 0),
    "env": ({"-u", "--unset", "-C", "--chdir"}, 0), "timeout": ({"-s", "--signal", "-k", "--kill-after"}, 1),
    "nice": ({"-n", "--adjustment"}, 0), "nohup": (set(), 0), "command": (set(), 0), "builtin": (set(), 0),
    "exec": ({"-a"}, 0), "time": ({"-f", "--format", "-o", "--output"}, 0), "setsid": (set(), 0),
    "stdbuf": ({"-i", "-o", "-e", "--input", "--output", "--error"}, 0), "ionice": ({"-c", "-n", "-p"}, 0),
    "chrt": (set(), 1), "taskset": (set(), 1), "unbuffer": (set(), 0), "busybox": (set(), 0),
    "xargs": ({"-n", "-I", "-P", "-d", "-L", "-s", "-E", "-a", "--max-args", "--max-procs", "--delimiter",
               "--arg-file"}, 0),
    "flock": ({"-w", "--timeout", "-E", "--conflict-exit-code"}, 1), "chroot": (set(), 1),
    "fakeroot": (set(), 0), "nocorrect": (set(), 0), "noglob": (set(), 0), "caffeinate": (set(), 0),
}
_STRING_OPTIONS = {"su": {"-c", "--command"}, "runuser": {"-c", "--command"}, "flock": {"-c", "--command"},
                   "env": {"-S", "--split-string"}}


def nsfc_check(command: str) -> str | None:
    """Why ``command`` is refused by the nsfc filter, or ``None`` when no family matches."""
    try:
        return _check_line(command, 0)
    except Exception:  # a bug in the reader: a tripwire fails closed
        return UNREADABLE


def _check_line(line: str, depth: int) -> str | None:
    if depth > MAX_DEPTH:
        return TOO_DEEP
    if _fork_bomb(re.sub(r"[\"'\\]", "", line)):
        return FORK_BOMB
    state = _State(depth)
    for command in split_commands(line):
        reason = state.check(command)
        if reason:
            return reason
    return None


def _fork_bomb(text: str) -> bool:
    """A function that pipes itself into itself in the background: ``:(){ :|:& };:``."""
    for match in _FUNCTION.finditer(text):
        name = re.escape(match.group(1))
        body = text[match.end(): match.end() + 400].split("}", 1)[0]
        if re.search(name + r"\s*\|\s*" + name + r"\s*&", body):
            return True
    return False


def _norm(path: str, literal: bool = False) -> str:
    """``$HOME``/``${HOME}`` as ``~``; unless ``literal``, ``/usr/../``, ``//`` and ``/.`` as the root
    they are."""
    path = re.sub(r"^\$(?:HOME\b|\{HOME\})", "~", path)
    if literal or not path.startswith("/"):
        return path
    return posixpath.normpath("/" + path.lstrip("/"))


def _rootish(path: str, literal: bool = False) -> bool:
    """The root, a home folder, a system folder, or a glob right inside one of them."""
    path = _norm(path, literal)
    if path.startswith("~"):
        rest = path.split("/")[1:]
        return not [p for p in rest if p] or (len([p for p in rest if p]) == 1 and bool(_GLOB.search(rest[-1])))
    if not path.startswith("/"):
        return False
    parts = [p for p in path.split("/") if p]
    if not parts:
        return True
    if len(parts) == 1:
        return bool(_GLOB.search(parts[0]) or _SYSTEM.fullmatch(parts[0]))
    return len(parts) == 2 and bool(_SYSTEM.fullmatch(parts[0])) and bool(_GLOB.search(parts[1]))


def _under_etc(path: str) -> bool:
    path = _norm(path)
    return path == "/etc" or path.startswith("/etc/")


def _disk(path: str) -> bool:
    return bool(_DISK.match(_norm(path)))


def _name(word: Word) -> str:
    return posixpath.basename(word.text) if "/" in word.text.rstrip("/") else word.text


def _skip_options(words: list[Word], with_value: set[str]) -> int:
    """The index of the first word after the options (``--`` ends them)."""
    i = 0
    while i < len(words):
        text = words[i].text
        if text == "--":
            return i + 1
        if not text.startswith("-") or text == "-":
            return i
        i += 2 if text in with_value else 1
    return i


def _operands(words: list[Word]) -> list[str]:
    """The arguments that are not options (all of them after ``--``)."""
    out, options = [], True
    for word in words:
        if options and word.text == "--":
            options = False
        elif not (options and word.text.startswith("-") and word.text != "-"):
            out.append(word.text)
    return out


@dataclass
class _State:
    """What the commands of one line leave behind: the folder ``cd`` went to, a download upstream."""

    depth: int
    in_root: bool = False
    download: bool = False

    def check(self, command: Command) -> str | None:
        if not command.after_pipe:
            self.download = False
        reason = self._redirections(command) or self._command(command.words, command)
        for word in command.words + [target for _, target in command.redirs]:
            for nested in word.subs:
                reason = reason or _check_line(nested, self.depth + 1)
        return reason

    def _redirections(self, command: Command) -> str | None:
        for op, target in command.redirs:
            if ">" not in op or target.text.isdigit() or target.text == "-":
                continue
            if _disk(target.text) or target.text in ("/dev/mem", "/dev/kmem", "/dev/port"):
                return DISK_WRITE
            if _under_etc(target.text):
                return ETC_WRITE
            if _norm(target.text) == "/proc/sysrq-trigger":
                return SHUTDOWN
        return None

    def _command(self, words: list[Word], command: Command) -> str | None:
        words = list(words)
        while words and _ASSIGNMENT.match(words[0].text) and not words[0].text.startswith("="):
            words.pop(0)  # x=1 rm ...
        switched = False
        while words:
            name = _name(words[0])
            if name in _KEYWORDS:
                words.pop(0)
                continue
            if name in _DATA_KEYWORDS:
                return None
            if name not in _WRAPPERS and name not in _USER_SWITCHERS:
                break
            switched = switched or name in _USER_SWITCHERS
            args = words[1:]
            if name == "command" and any(w.text in ("-v", "-V") for w in args[:2]):
                return None  # "command -v rm" looks the command up, it runs nothing
            for i, word in enumerate(args[:-1]):
                if word.text in _STRING_OPTIONS.get(name, ()):
                    return _check_line(args[i + 1].text, self.depth + 1) or (OTHER_USER if switched else None)
            with_value, positional = _WRAPPERS.get(name, (set(), 0))
            rest = args[_skip_options(args, with_value):]
            while name in ("env", "sudo") and rest and _ASSIGNMENT.match(rest[0].text):
                rest = rest[1:]  # env A=1 B=2 cmd
            words = rest[positional:]  # timeout 5 cmd, chroot /new cmd
        if not words:
            return OTHER_USER if switched else None
        return self._rules(_name(words[0]), words[1:], command) or (OTHER_USER if switched else None)

    def _rules(self, name: str, args: list[Word], command: Command) -> str | None:
        texts = [w.text for w in args]
        if name in _DOWNLOADERS:
            self.download = True
        if name in ("cd", "pushd"):
            targets = _operands(args)
            self.in_root = not targets or _rootish(targets[0])
            return None
        if name in _SHELLS or name in ("source", "."):
            return self._shell(name, args, command)
        if name == "eval":
            if any(w.subs for w in args):
                return GENERATED
            return _check_line(" ".join(texts), self.depth + 1)
        if name in ("trap", "watch"):  # the strings they run later
            code = texts[_skip_options(args, {"-n", "--interval"}):] if name == "watch" else texts[:1]
            return _check_line(" ".join(code), self.depth + 1) if code else None
        if _INTERPRETER.fullmatch(name):
            reads_stdin = not any(t in _CODE_FLAGS or not t.startswith("-") or t.startswith("-c") for t in texts) \
                or texts[-1:] == ["-"]
            return DOWNLOAD_INTERPRETER if command.after_pipe and self.download and reads_stdin else None
        if name == "rm":
            return self._rm(args) or self._writes(name, args)
        if name == "find":
            return self._find(args)
        if name.startswith("mkfs") or name in ("mke2fs", "mkdosfs", "mkntfs"):
            return MKFS
        if name == "dd":
            for text in texts:
                if text.startswith("of="):
                    target = _norm(text[3:])
                    if target.startswith("/dev/") and not _SAFE_DEVICES.match(target):
                        return DD_DEVICE
                    if _under_etc(target):
                        return ETC_WRITE
            return None
        if name in ("shutdown", "reboot", "halt", "poweroff"):
            return SHUTDOWN
        if name in ("systemctl", "loginctl") and set(texts) & _POWER_VERBS:
            return SHUTDOWN
        if name in ("init", "telinit") and set(_operands(args)) & {"0", "6"}:
            return SHUTDOWN
        if name in ("chmod", "chown", "chgrp") and any(_CAPITAL_R.fullmatch(t) for t in texts) \
                and any(_rootish(t) for t in _operands(args)):
            return CHMOD_ROOT
        if name in _WIPERS and any(_disk(t) for t in texts):
            return DISK_WIPE
        if name == "kill":
            return self._kill(texts)
        if name == "killall5":
            return KILL_ALL
        return self._writes(name, args)

    def _writes(self, name: str, args: list[Word]) -> str | None:
        operands = _operands(args)
        texts = [w.text for w in args]
        if name == "tee" and any(_disk(t) for t in operands):
            return DISK_WRITE
        if name in _ETC_WRITERS and any(_under_etc(t) for t in operands):
            return ETC_WRITE
        if name == "sed" and any(t.startswith(("-i", "--in-place")) for t in texts) \
                and any(_under_etc(t) for t in operands):
            return ETC_WRITE
        if name in _COPIERS:
            target = next((texts[i + 1] for i, t in enumerate(texts[:-1]) if t in ("-t", "--target-directory")),
                          operands[-1] if len(operands) > 1 else None)
            if target and _disk(target):
                return DISK_WRITE
            if target and _under_etc(target):
                return ETC_WRITE
        return None

    def _shell(self, name: str, args: list[Word], command: Command) -> str | None:
        if any(w.procsub and any(_downloads(sub) for sub in w.subs) for w in args):
            return DOWNLOADED_SCRIPT
        stdin = [(op, target) for op, target in command.redirs if op in ("<", "<<", "<<-", "<<<")]
        if any(_downloads(sub) for _, target in stdin for sub in target.subs):
            return DOWNLOADED_SCRIPT  # sh < <(curl ...), bash <<< "$(wget ...)"
        if any(w.subs and not w.procsub for w in args):
            return GENERATED  # sh -c "$(...)", bash $(curl ...)
        has_c, from_stdin, i = False, False, 0
        while name != "." and name != "source" and i < len(args):
            text = args[i].text
            if text == "--" or text == "-":
                i += text == "--"
                from_stdin = from_stdin or text == "-"
                break
            if text.startswith("--"):
                i += 2 if text in ("--rcfile", "--init-file") else 1
                continue
            if len(text) > 1 and text[0] in "-+":
                has_c = has_c or (text[0] == "-" and "c" in text[1:])
                from_stdin = from_stdin or "s" in text[1:]
                i += 2 if text[-1] in "oO" else 1
                continue
            break
        rest = args[i:]
        if has_c:
            return _check_line(rest[0].text, self.depth + 1) if rest else None
        script = rest[0].text if rest and not from_stdin else None
        if script is None or script in ("/dev/stdin", "-", "/proc/self/fd/0"):
            if command.after_pipe:
                return DOWNLOAD_SHELL if self.download else PIPE_SHELL
            for op, target in stdin:  # the script a here-document or here-string gives the shell
                body = target.heredoc if op in ("<<", "<<-") else target.text if op == "<<<" else None
                reason = _check_line(body, self.depth + 1) if body else None
                if reason:
                    return reason
        return None

    def _rm(self, args: list[Word]) -> str | None:
        texts = [w.text for w in args]
        before_dashes = texts[: texts.index("--")] if "--" in texts else texts
        if not any(_RECURSIVE.fullmatch(t) for t in before_dashes):
            return NO_PRESERVE_ROOT if "--no-preserve-root" in before_dashes else None
        targets = _operands(args)
        if any(_rootish(t, literal=True) for t in targets):
            return RM_ROOT
        if "--no-preserve-root" in before_dashes:
            return NO_PRESERVE_ROOT
        if any(_rootish(t) for t in targets):  # /usr/../, /tmp/../.., /.
            return RM_ROOT
        if self.in_root and any(t in ("*", "./*", ".", "./", ".*", "./.*") for t in targets):
            return RM_ROOT  # cd / && rm -rf *
        return None

    def _find(self, args: list[Word]) -> str | None:
        texts = [w.text for w in args]
        i = 0
        while i < len(texts) and (texts[i] in ("-H", "-L", "-P") or texts[i].startswith("-O")):
            i += 1
        paths = []
        while i < len(texts) and not texts[i].startswith(("-", "(", "!")):
            paths.append(texts[i])
            i += 1
        root = any(_rootish(p) for p in paths)
        for j, text in enumerate(texts):
            if text == "-delete" and root:
                return RM_ROOT
            if text in ("-exec", "-execdir", "-ok", "-okdir") and j + 1 < len(texts):
                end = next((k for k in range(j + 1, len(texts)) if texts[k] in (";", "+")), len(texts))
                if root and _name(args[j + 1]) in ("rm", "shred", "unlink", "rmdir"):
                    return RM_ROOT
                reason = self._command(args[j + 1: end], Command())
                if reason:
                    return reason
        return None

    def _kill(self, texts: list[str]) -> str | None:
        targets: list[str] = []
        i, signal = 0, False
        while i < len(texts):
            text = texts[i]
            if targets or (signal and text != "--"):
                targets.append(text)  # after the signal, "-1" is a process id: every process
            elif text == "--":
                targets.extend(texts[i + 1:])
                break
            elif text in ("-l", "-L", "--list", "--table"):
                return None
            elif text in ("-s", "-n", "--signal"):
                signal, i = True, i + 1
            elif text.startswith("-") and len(text) > 1:
                signal = True
            else:
                targets.append(text)
            i += 1
        return KILL_ALL if any(re.fullmatch(r"-?0*1", t) for t in targets) else None


def _downloads(line: str) -> bool:
    """Whether ``line`` runs curl, wget or fetch (a download)."""
    for command in split_commands(line):
        words = [w for w in command.words if not _ASSIGNMENT.match(w.text)]
        if any(_name(w) in _DOWNLOADERS for w in words[:4]):
            return True
    return False
