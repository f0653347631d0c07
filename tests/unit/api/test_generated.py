"""The committed schemas/ and manifests/crds/ are exactly what the generator writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kai.api import generate
from kai.api.registry import all_kinds, json_schema
from kai.api.schema import dumps_schema
from kai.cli import main as kai_main

REPO = Path(__file__).resolve().parents[3]


def test_committed_files_are_not_stale() -> None:
    drift = generate.check(REPO)
    assert not drift, "run `kai generate`:\n" + "\n".join(drift.lines())


def test_generation_is_deterministic() -> None:
    assert generate.generated_files() == generate.generated_files()


def test_every_kind_has_a_schema_and_a_crd() -> None:
    files = generate.generated_files()
    for info in all_kinds():
        assert info.schema_path in files
        assert info.crd_path in files
    kustomization = yaml.safe_load(files["manifests/crds/kustomization.yaml"])
    assert kustomization["resources"] == sorted(Path(i.crd_path).name for i in all_kinds())


def test_schema_file_is_the_registry_schema() -> None:
    files = generate.generated_files()
    for info in all_kinds():
        text = files[info.schema_path]
        assert text.endswith("}\n")
        assert json.loads(text) == json_schema(info)
        assert text == dumps_schema(json_schema(info))
        schema = json.loads(text)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"].endswith(f"/{info.group}/{info.kind}.{info.version}.json")


def test_check_names_stale_missing_and_orphaned_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert not generate.check(tmp_path)
    info = all_kinds()[0]
    (tmp_path / info.schema_path).write_text("{}\n")
    (tmp_path / info.crd_path).unlink()
    (tmp_path / "schemas" / "old.json").write_text("{}\n")
    capsys.readouterr()
    assert generate.main(["--root", str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert f"stale: {info.schema_path}" in out
    assert f"missing: {info.crd_path}" in out
    assert "schemas/old.json" in out
    # --check wrote nothing
    assert (tmp_path / info.schema_path).read_text() == "{}\n"
    assert not (tmp_path / info.crd_path).exists()
    # writing repairs everything, and only what differed is reported
    assert generate.main(["--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 3
    assert not generate.check(tmp_path)
    assert not (tmp_path / "schemas" / "old.json").exists()


def test_kai_generate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert kai_main(["generate", "--root", str(tmp_path), "--check"]) == 1
    assert kai_main(["generate", "--root", str(tmp_path)]) == 0
    assert kai_main(["generate", "--root", str(tmp_path), "--check"]) == 0
    assert kai_main(["generate", "--root", str(tmp_path / "nope"), "--check"]) == 2
