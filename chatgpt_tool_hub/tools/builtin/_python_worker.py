"""Run one piece of Python code the way the interactive interpreter would.

Started by :mod:`chatgpt_tool_hub.tools.builtin.python_tool` as
``python -I _python_worker.py`` inside the sandbox (see ``_sandbox.py``); the
code arrives on stdin. The value of a last expression is shown with
``sys.displayhook`` (``repr``; nothing for ``None``). Errors are printed as a
traceback whose frames are the user's code only. Exit status: 0 when the code
ran, 1 when it raised or did not compile, or the code's own ``sys.exit`` status.

Standard library only: this file runs in a fresh interpreter and must import
nothing from the package.
"""

import ast
import builtins
import linecache
import os
import sys
import traceback
import types

FILENAME = "<input>"
MAX_FRAMES = 24  # longer runs of frames keep their first and last ones
_CO_COROUTINE = 0x0080  # inspect.CO_COROUTINE, without importing inspect
_loop = None


def main():
    source = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    sys.stdin.close()
    sys.stdin = open(os.devnull, encoding="utf-8")  # input() meets EOF instead of waiting
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True)
    sys.argv = [""]
    sys.path.insert(0, "")  # like the REPL: modules in the working directory are importable
    linecache.cache[FILENAME] = (len(source), None, source.splitlines(True), FILENAME)

    module = types.ModuleType("__main__")
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    namespace = module.__dict__

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
        return 1

    try:
        _execute(body, namespace)
        if tail is not None:
            sys.displayhook(_execute(tail, namespace))
    except SystemExit:
        sys.stdout.flush()
        raise
    except BaseException as exc:
        _show(exc)
        return 1
    return 0


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
