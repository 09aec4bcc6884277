"""The snapshot-variant generator: edits apply exactly, and an edit that changes nothing fails."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from assay.eval.variants import VariantError, drift, main, render_all, write_all

BASE_OBJECTS = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "shop",
                "labels": {"app.kubernetes.io/name": "web"},
            },
            "spec": {
                "replicas": 2,
                "template": {"spec": {"containers": [{"name": "web", "image": "web:1"}]}},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop"},
            "spec": {"containers": [{"name": "web", "image": "web:1"}]},
        },
    ],
}
UNTOUCHED = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: shop}\n"


def make_spec(tmp_path: Path, variants: list[dict[str, object]]) -> Path:
    base = tmp_path / "snapshots" / "base"
    (base / "shop").mkdir(parents=True)
    (base / "shop" / "objects.yaml").write_text(yaml.safe_dump(BASE_OBJECTS))
    (base / "shop" / "config.yaml").write_text(UNTOUCHED)
    (base / "logs" / "shop" / "web-1").mkdir(parents=True)
    (base / "logs" / "shop" / "web-1" / "web.log").write_text("2026-03-10T08:00:00Z started\n")
    spec = tmp_path / "variants.yaml"
    spec.write_text(
        yaml.safe_dump({"base": "snapshots/base", "out": "snapshots", "variants": variants})
    )
    return spec


def objects(files: dict[str, bytes], name: str) -> list[dict[str, object]]:
    return yaml.safe_load(files[name])["items"]  # type: ignore[no-any-return]


def test_edits_apply_and_untouched_files_are_copied_byte_for_byte(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        [
            {
                "name": "v-01",
                "about": "web runs a new image and carries a team label",
                "edits": [
                    {
                        "match": {"kind": "Deployment", "name": "web"},
                        "set": {
                            "/spec/template/spec/containers/0/image": "web:2",
                            "/metadata/labels/example.com~1team": "shop",
                        },
                    },
                    {
                        "match": {"kind": "Pod", "name_prefix": "web-"},
                        "remove": ["/spec/containers/0/image"],
                    },
                ],
                "logs": {"shop/web-1/web.log": {"append": "2026-03-10T08:01:00Z ERROR boom\n"}},
            }
        ],
    )
    [(folder, files)] = render_all(spec).items()
    deployment, pod = objects(files, "shop/objects.yaml")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "web:2"  # type: ignore[index]
    assert deployment["metadata"]["labels"]["example.com/team"] == "shop"  # type: ignore[index]
    assert "image" not in pod["spec"]["containers"][0]  # type: ignore[index]
    assert files["shop/config.yaml"] == UNTOUCHED.encode()
    assert files["logs/shop/web-1/web.log"].endswith(b"ERROR boom\n")
    assert b"web runs a new image" in files["GENERATED.md"]
    write_all({folder: files})
    assert drift({folder: files}) == []
    (folder / "shop" / "config.yaml").write_text(UNTOUCHED + "# edited by hand\n")
    assert drift({folder: files}) == ["v-01/shop/config.yaml"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            {"match": {"kind": "Deployment", "name": "api"}, "set": {"/spec/replicas": 3}},
            "no object matches",
        ),
        (
            {"match": {"kind": "Deployment", "name": "web"}, "set": {"/spec/replicas": 2}},
            "unchanged",
        ),
        (
            {"match": {"kind": "Deployment", "name": "web"}, "remove": ["/spec/paused"]},
            "nothing to remove",
        ),
        ({"match": {"kind": "Pod"}, "set": {"/spec/containers/5/image": "x"}}, "past the end"),
    ],
)
def test_an_edit_that_changes_nothing_is_an_error_naming_the_variant(
    tmp_path: Path, edit: dict[str, object], message: str
) -> None:
    spec = make_spec(tmp_path, [{"name": "v-02", "about": "broken", "edits": [edit]}])
    with pytest.raises(VariantError, match=rf"variant v-02, edit 1 .*{message}"):
        render_all(spec)


def test_delete_removes_objects_and_log_folders(tmp_path: Path) -> None:
    spec = make_spec(
        tmp_path,
        [
            {
                "name": "v-03",
                "about": "no pod, no logs",
                "delete": [{"kind": "Pod", "namespace": "shop"}],
                "delete_logs": ["shop"],
            }
        ],
    )
    [files] = render_all(spec).values()
    assert [o["kind"] for o in objects(files, "shop/objects.yaml")] == ["Deployment"]
    assert not any(name.startswith("logs/") for name in files)


def test_check_mode_exits_1_on_drift_and_0_once_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = make_spec(
        tmp_path,
        [
            {
                "name": "v-04",
                "about": "more replicas",
                "edits": [{"match": {"kind": "Deployment"}, "set": {"/spec/replicas": 5}}],
            }
        ],
    )
    assert main([str(spec), "--check"]) == 1
    assert "variant drift" in capsys.readouterr().err
    assert main([str(spec)]) == 0
    assert main([str(spec), "--check"]) == 0
