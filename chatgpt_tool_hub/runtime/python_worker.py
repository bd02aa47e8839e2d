"""Run Python code the way the interactive interpreter would, call after call.

Started by :mod:`chatgpt_tool_hub.tools.builtin.python_tool` as
``python -I python_worker.py REQ_FD RESP_FD`` (through the launcher of
``sandbox.py``, which sets the rlimits). One worker serves one session: the
variables of one call are there in the next, like a REPL.

Protocol: the parent writes a request frame on ``REQ_FD`` and the worker answers
with one frame on ``RESP_FD``; a frame is a 4-byte big-endian length and that
many bytes of UTF-8 JSON. Request ``{"code": str}``; reply ``{"status": "ok" |
"error" | "exit", "code": int | None}``. What the user's code prints never
travels in a frame: file descriptors 1 and 2 are the parent's output pipe
(stdin is ``/dev/null``), and the protocol descriptors are not inheritable, so
``os.write(1, ...)`` and subprocesses cannot corrupt the protocol (code that
writes to the protocol descriptors on purpose can: it runs in this process).
Before each call fds 1 and 2 and ``sys.stdout``/``sys.stderr`` are put back, in
case the previous code redirected or closed them. End of file on ``REQ_FD``
(the parent is gone) ends the worker; the launcher's supervisor, whose child
this process is, then kills every process the code started.

Without arguments (Windows, which has no fd passing) the worker runs the code
read from stdin once and exits with 0 (ran), 1 (raised or did not compile) or
the code's ``sys.exit`` status.

The value of a last expression is shown with ``sys.displayhook`` (``repr``;
nothing for ``None``). Errors print a traceback whose frames are the user's
code only. Standard library only: this file must import nothing from the package
(the parent imports the frame helpers from it).
"""

import ast
import builtins
import io
import json
import linecache
import os
import struct
import sys
import traceback
import types

FILENAME = "<input>"
MAX_FRAMES = 24  # longer runs of frames keep their first and last ones
MAX_REQUEST = 64 * 1024 * 1024
EXIT_PROTOCOL_LOST = 86  # exit status when the protocol pipes stopped working (closed by the code)
_CO_COROUTINE = 0x0080  # inspect.CO_COROUTINE, without importing inspect
_HEADER = struct.Struct(">I")
_loop = None


def main():
    if len(sys.argv) == 3:
        return serve(int(sys.argv[1]), int(sys.argv[2]))
    source = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    namespace = _setup()
    status, code = run_code(source, namespace)
    if status == "exit":
        return code
    return 0 if status == "ok" else 1


def serve(req_fd, resp_fd):
    """Answer requests until the parent closes ``req_fd``."""
    for fd in (req_fd, resp_fd):
        os.set_inheritable(fd, False)  # the user's subprocesses must not get the protocol
    out_fds = (os.dup(1), os.dup(2))  # private copies of the output pipe, to restore fds 1 and 2
    namespace = _setup()
    streams = (sys.stdout, sys.stderr)
    try:
        while True:
            request = _read_frame(req_fd)
            if request is None:
                return 0
            _restore_output(out_fds, streams)
            status, code = run_code(request.get("code", ""), namespace)
            _flush()
            # the worker's pid and its keeper's: the parent stops whatever else the call left running
            _write_frame(resp_fd, {"status": status, "code": code, "pid": os.getpid(), "keeper": os.getppid()})
    except OSError:  # the parent is gone (broken pipe), or the code closed the protocol pipes
        return EXIT_PROTOCOL_LOST


def _setup():
    """Streams, ``sys.path`` and a fresh ``__main__`` namespace."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # input() meets EOF instead of waiting; nothing can read the parent
    os.close(null)
    sys.stdin = open(os.devnull, encoding="utf-8")
    sys.stdout = _text_stream(1)
    sys.stderr = _text_stream(2)
    sys.argv = [""]
    sys.path.insert(0, "")  # like the REPL: modules in the working directory are importable
    module = types.ModuleType("__main__")
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    return module.__dict__


def _text_stream(fd):
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


def _restore_output(out_fds, streams):
    for fd, saved in zip((1, 2), out_fds, strict=False):
        try:
            os.dup2(saved, fd)
        except OSError:
            pass
    sys.stdout, sys.stderr = streams


def _flush():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass


def _read_exact(fd, size):
    chunks, left = [], size
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd):
    header = _read_exact(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_REQUEST:
        return None
    body = _read_exact(fd, size)
    return None if body is None else json.loads(body.decode("utf-8"))


def _write_frame(fd, message):
    view = memoryview(encode_frame(message))
    while view:
        view = view[os.write(fd, view):]


# ---- the frame format, shared with the parent (python_tool imports these) ----------------


def encode_frame(message):
    """A 4-byte big-endian length, then the message as UTF-8 JSON."""
    data = json.dumps(message).encode("utf-8", errors="surrogatepass")
    return _HEADER.pack(len(data)) + data


def decode_frame(buffer, max_size):
    """The message in ``buffer`` once it holds a whole frame, else None; ValueError when garbled."""
    if len(buffer) < _HEADER.size:
        return None
    (size,) = _HEADER.unpack_from(buffer)
    if size > max_size:
        raise ValueError("frame of %d bytes is too large" % size)
    if len(buffer) < _HEADER.size + size:
        return None
    return json.loads(bytes(buffer[_HEADER.size:_HEADER.size + size]).decode("utf-8"))


def run_code(source, namespace):
    """Run ``source`` in ``namespace``: ("ok" | "error" | "exit", exit status or None)."""
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)
    try:
        tree = ast.parse(source, FILENAME, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
        body = compile(tree, FILENAME, "exec", flags=flags, dont_inherit=True)
        tail = compile(last, FILENAME, "eval", flags=flags, dont_inherit=True) if last is not None else None
    except BaseException as exc:  # SyntaxError, ValueError (null bytes), MemoryError, RecursionError
        _show(exc)
        return "error", None
    try:
        _execute(body, namespace)
        if tail is not None:
            sys.displayhook(_execute(tail, namespace))
    except SystemExit as exc:
        return "exit", _exit_status(exc.code)
    except BaseException as exc:
        _show(exc)
        return "error", None
    return "ok", None


def _exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    try:
        sys.stderr.write("%s\n" % (code,))
    except BaseException:
        pass
    return 1


def _execute(code, namespace):
    global _loop
    result = eval(code, namespace)
    if code.co_flags & _CO_COROUTINE:  # top-level ``await``
        import asyncio

        if _loop is None:
            _loop = asyncio.new_event_loop()
            asyncio.set_event_loop(_loop)
        result = _loop.run_until_complete(result)
    return result


def _show(exc):
    """Print the traceback of ``exc`` from the user's first frame on.

    The frames before it are this file's (and ``ast``'s for a syntax error);
    with no user frame at all (the code did not compile) none are shown.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
        tb = tb.tb_next
    exc.__traceback__ = tb
    try:
        parts = list(traceback.TracebackException(type(exc), exc, tb, compact=True).format())
        text = "".join(_trim_frames(parts))
    except BaseException:  # formatting failed (say, a broken __str__): say at least what it was
        text = "%s (the traceback could not be formatted)\n" % type(exc).__name__
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    sys.stderr.write(text)
    sys.stderr.flush()


def _is_frame(part):
    return part.startswith('  File "') or part.startswith("  [Previous line repeated")


def _trim_frames(parts):
    """Cut the middle of any run of more than ``MAX_FRAMES`` frames."""
    out, run = [], []

    def flush():
        if len(run) > MAX_FRAMES:
            keep_head = 4
            keep_tail = MAX_FRAMES - keep_head
            out.extend(run[:keep_head])
            out.append("  ... [%d frames omitted] ...\n" % (len(run) - keep_head - keep_tail))
            out.extend(run[-keep_tail:])
        else:
            out.extend(run)
        del run[:]

    for part in parts:
        if _is_frame(part):
            run.append(part)
        else:
            flush()
            out.append(part)
    flush()
    return out


if __name__ == "__main__":
    sys.exit(main())
