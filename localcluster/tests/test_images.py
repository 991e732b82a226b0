"""Unit tests (no cluster, no mmdebstrap): the OCI archive containerd imports, the image cache key,
the cache's atomic writes, the import that skips what containerd already has, and the CLI's errors.
The one real build is the pause image's (a static C program: about a second)."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

from mpiplat import cli
from mpiplat.localcluster import images
from mpiplat.localcluster.images import ImageError
from mpiplat.versions import load as load_versions

IMAGE = "mpiplat.local/test:1"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("MPIPLAT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _reg(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, io.BytesIO(data)


def _archive(tmp_path: Path, members) -> tuple[Path, str]:
    layer = images.write_layer(tmp_path / "layer.tar.gz", members)
    config = images.image_config(images.RECIPES["openmpi"], [layer.diff_id], "amd64")
    dest = tmp_path / "image.tar"
    return dest, images.write_oci_archive(dest, IMAGE, config, [layer])


def _blobs(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}


# ---------------------------------------------------------------- the OCI archive

def test_archive_is_an_oci_layout_whose_index_names_the_image_and_whose_digests_match(tmp_path):
    archive, digest = _archive(tmp_path, [_reg("./etc/hello", b"hi\n"), _reg("./bin/tool", b"x" * 5000, 0o755)])
    files = _blobs(archive)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(files["index.json"])
    assert index["mediaType"] == images.MT_INDEX
    [desc] = index["manifests"]
    # ctr images import names the image from this annotation.
    assert desc["annotations"]["io.containerd.image.name"] == IMAGE
    assert desc["annotations"]["org.opencontainers.image.ref.name"] == "1"
    assert desc["platform"] == {"architecture": "amd64", "os": "linux"}
    assert desc["digest"] == digest == images.manifest_digest(archive)
    # Every descriptor's digest and size are its blob's.
    manifest_bytes = files[f"blobs/sha256/{digest[7:]}"]
    assert _sha(manifest_bytes) == digest and len(manifest_bytes) == desc["size"]
    manifest = json.loads(manifest_bytes)
    for d in (manifest["config"], *manifest["layers"]):
        blob = files[f"blobs/sha256/{d['digest'][7:]}"]
        assert (_sha(blob), len(blob)) == (d["digest"], d["size"])
    # The config's diff_id is the digest of the uncompressed layer, which holds the files.
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    [layer_desc] = manifest["layers"]
    assert layer_desc["mediaType"] == images.MT_LAYER
    raw = gzip.decompress(files[f"blobs/sha256/{layer_desc['digest'][7:]}"])
    assert config["rootfs"] == {"type": "layers", "diff_ids": [_sha(raw)]}
    with tarfile.open(fileobj=io.BytesIO(raw)) as layer:
        assert layer.extractfile("./etc/hello").read() == b"hi\n"
        assert layer.getmember("./bin/tool").mode == 0o755
    assert config["os"] == "linux" and config["config"]["WorkingDir"] == "/home/mpiuser"
    assert "PATH=" + images.PATH in config["config"]["Env"]


def test_same_content_gives_the_same_archive_digest(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, one = _archive(tmp_path / "a", [_reg("./f", b"same")])
    _, two = _archive(tmp_path / "b", [_reg("./f", b"same")])
    _, other = _archive(tmp_path / "b", [_reg("./f", b"different")])
    assert one == two != other


def test_root_layer_drops_device_nodes_and_adds_the_recipe_dirs(tmp_path):
    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("./dev", "./etc", "./run"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        null = tarfile.TarInfo("./dev/null")
        null.type, null.devmajor, null.devminor = tarfile.CHRTYPE, 1, 3
        tar.addfile(null)
        tar.addfile(*_reg("./etc/os-release", b"ID=debian\n"))
    layer = images.write_layer(tmp_path / "l.tar.gz", images.rootfs_members(rootfs, ("/run/sshd",)))
    with tarfile.open(layer.path) as tar:
        names = tar.getnames()
        assert names == ["./dev", "./etc", "./run", "./etc/os-release", "./run/sshd"]
        assert tar.getmember("./run/sshd").isdir()


# ---------------------------------------------------------------- the cache key

def test_cache_key_changes_with_the_recipe_or_a_package_version_and_not_otherwise():
    r = images.RECIPES["mpich"]
    versions = {"mpich": "4.0.2-3+b1", "openssh-server": "1:9.2p1-2+deb12u10"}
    key = images.cache_key(r, versions)
    assert images.cache_key(dataclasses.replace(r), dict(versions)) == key
    assert images.cache_key(r, {**versions, "mpich": "4.0.2-3+b2"}) != key
    assert images.cache_key(r, {**versions, "libc6": "2.36-9+deb12u13"}) != key
    changed = [
        dataclasses.replace(r, pypi={**r.pypi, "mpi4py": "4.1.1"}),
        dataclasses.replace(r, packages=(*r.packages, "procps")),
        dataclasses.replace(r, files={**r.files, "/etc/motd": "hello\n"}),
        dataclasses.replace(r, hooks=(*r.hooks, "true")),
        dataclasses.replace(r, env={**r.env, "A": "1"}),
    ]
    assert len({key, *(images.cache_key(c, versions) for c in changed)}) == len(changed) + 1


def test_the_pause_key_follows_its_c_source(tmp_path, monkeypatch):
    r = images.RECIPES["pause"]
    key = images.cache_key(r, {})
    src = tmp_path / "pause.c"
    src.write_text(images.source_path(r).read_text() + "\n/* changed */\n")
    monkeypatch.setattr(images, "source_path", lambda _r: src)
    assert images.cache_key(r, {}) != key


@pytest.fixture
def fake_apt(cache, monkeypatch) -> dict:
    """apt as a table: each package depends on nothing and has the version in `table`."""
    table = {"openmpi-bin": "4.1.4-3+b1", "mpich": "4.0.2-3+b1", "calls": 0}
    monkeypatch.setattr(images.shutil, "which", lambda _tool: "/usr/bin/" + _tool)
    monkeypatch.setattr(images, "_apt_stamp", lambda: table.get("stamp", "s1"))
    monkeypatch.setattr(images, "_apt_closure", lambda pkgs: sorted(pkgs))

    def candidates(pkgs):
        table["calls"] += 1
        return {p: table.get(p, "1.0") for p in pkgs}

    monkeypatch.setattr(images, "_apt_candidates", candidates)
    return table


def test_a_package_update_changes_only_the_keys_of_the_images_that_install_it(fake_apt):
    before = {name: images.key_of(r) for name, r in images.RECIPES.items()}
    assert images.key_of(images.RECIPES["openmpi"]) == before["openmpi"]
    fake_apt["openmpi-bin"], fake_apt["stamp"] = "4.1.4-3+b2", "s2"  # apt update brought a new openmpi-bin
    after = {name: images.key_of(r) for name, r in images.RECIPES.items()}
    assert [n for n in before if before[n] != after[n]] == ["openmpi"]


def test_debian_versions_are_asked_of_apt_once_per_package_set_until_apt_changes(fake_apt, cache):
    assert images.debian_versions(["mpich", "python3"]) == {"mpich": "4.0.2-3+b1", "python3": "1.0"}
    images.debian_versions(["python3", "mpich"])
    assert fake_apt["calls"] == 1
    assert json.loads((cache / "images" / "apt-versions.json").read_text())["stamp"] == "s1"
    fake_apt["stamp"] = "s2"
    images.debian_versions(["python3", "mpich"])
    assert fake_apt["calls"] == 2


# ---------------------------------------------------------------- building into the cache

def _fake_build(monkeypatch, calls: list, fail: bool = False):
    def build_static(r, work, log):
        calls.append(r.name)
        log.write(b"compiling\n")
        if fail:
            (work / "half-written").write_bytes(b"x")
            raise subprocess.CalledProcessError(1, ["gcc", "-static", "-Os"])
        return [images.write_layer(work / "layer.tar.gz", [_reg("./pause", b"binary", 0o755)])]

    monkeypatch.setattr(images, "_build_static", build_static)
    monkeypatch.setattr(images, "key_of", lambda r: K1)


K1, K2 = "1" * 16, "2" * 16  # cache keys are 16 hex digits


def test_a_cached_image_is_not_rebuilt_and_a_new_key_replaces_the_old_entry(cache, monkeypatch):
    calls: list = []
    _fake_build(monkeypatch, calls)
    out = io.StringIO()
    first = images.ensure_built(["pause"], stream=out)
    assert first == {images.PAUSE_IMAGE: cache / "images" / f"pause-{K1}.tar"}
    assert images.ensure_built(["mpiplat.local/pause:1"], stream=out) == first
    assert calls == ["pause"]
    lines = out.getvalue().splitlines()
    assert lines[0] == f"[1/1] building {images.PAUSE_IMAGE}; log: {cache / 'logs' / 'image-pause.log'}"
    assert f"  cached   {images.PAUSE_IMAGE} (pause-{K1}.tar)" in lines
    other = cache / "images" / f"pause-other-{K1}.tar"  # another recipe whose name starts with pause-
    other.write_bytes(b"")
    monkeypatch.setattr(images, "key_of", lambda r: K2)
    images.ensure_built(["pause"], stream=out)
    assert calls == ["pause", "pause"]
    assert sorted(p.name for p in (cache / "images").glob("pause-*.tar")) == [f"pause-{K2}.tar", other.name]


def _wheel(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("mpiplat/__init__.py", "")
        whl.writestr("mpiplat/dashboard/vendor/htmx/htmx.min.js", "js")
        whl.writestr("mpiplat-0.1.0.dist-info/entry_points.txt", "[console_scripts]\nmpiplat = mpiplat.cli:main\n")
    return path


def test_a_checkout_layer_unpacks_the_wheel_as_pip_would_with_its_console_script(tmp_path):
    with zipfile.ZipFile(_wheel(tmp_path / "mpiplat-0.1.0-py3-none-any.whl")) as whl:
        members = {info.name: (info, f.read() if f else None) for info, f in images._wheel_members(whl)}
    site = "." + images.SITE_PACKAGES
    assert members[f"{site}/mpiplat/dashboard/vendor/htmx/htmx.min.js"][1] == b"js"
    assert members[f"{site}/mpiplat-0.1.0.dist-info/entry_points.txt"][0].mode == 0o644
    for d in (site, f"{site}/mpiplat", f"{site}/mpiplat/dashboard/vendor/htmx"):  # each parent, before its files
        assert members[d][0].isdir() and list(members).index(d) < list(members).index(f"{site}/mpiplat/__init__.py")
    script, text = members["./usr/local/bin/mpiplat"]
    assert script.mode == 0o755 and text.decode().startswith("#!/usr/bin/python3\n")
    assert "from mpiplat.cli import main" in text.decode() and "sys.exit(main())" in text.decode()


def test_a_checkout_image_keeps_its_base_and_rebuilds_only_the_package_layer(cache, monkeypatch):
    built: list = []
    recipe = dataclasses.replace(images.RECIPES["pause"], name="pkg", checkout=True)
    monkeypatch.setitem(images.RECIPES, "pkg", recipe)
    monkeypatch.setattr(images, "_build_static", lambda r, work, log: built.append(r.name) or [
        images.write_layer(work / "layer.tar.gz", [_reg("./pause", b"binary", 0o755)])])
    monkeypatch.setattr(images, "base_key", lambda r: K1)
    monkeypatch.setattr(images, "_run", lambda cmd, log, **kw: _wheel(
        Path(cmd[cmd.index("--out-dir") + 1]) / "mpiplat-0.1.0-py3-none-any.whl"))
    for checkout in ("a", "b"):
        monkeypatch.setattr(images, "_checkout_hash", lambda c=checkout: c)
        path = images.ensure_built(["pkg"], stream=io.StringIO())[recipe.image]
    assert built == ["pkg"]  # the base once
    assert {p.name for p in (cache / "images").glob("pkg-*.tar")} == {f"pkg-base-{K1}.tar", path.name}
    blobs = [[n for n in _blobs(p) if n.startswith("blobs/")] for p in (cache / "images" / f"pkg-base-{K1}.tar", path)]
    assert len(blobs[1]) == len(blobs[0]) + 1  # the base's manifest, config and layer; then one more layer


def test_the_checkout_hash_covers_what_git_lists_and_not_ignored_files(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "src" / "mpiplat").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[project]\n")
    (repo / "src" / "mpiplat" / "a.py").write_text("A = 1\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    monkeypatch.setattr(images, "CHECKOUT", repo)
    first = images._checkout_hash()
    (repo / "src" / "mpiplat" / "__pycache__").mkdir()
    (repo / "src" / "mpiplat" / "__pycache__" / "a.pyc").write_bytes(b"x")
    assert images._checkout_hash() == first
    (repo / "src" / "mpiplat" / "a.py").write_text("A = 2\n")
    assert images._checkout_hash() != first


def test_a_failed_build_leaves_no_cache_entry_and_says_what_to_do(cache, monkeypatch):
    _fake_build(monkeypatch, [], fail=True)
    with pytest.raises(ImageError) as err:
        images.ensure_built(["pause"], stream=io.StringIO())
    first = str(err.value).splitlines()[0]
    log = cache / "logs" / "image-pause.log"
    assert first.startswith(f"building image {images.PAUSE_IMAGE} failed (gcc -static -Os: exit 1); see {log}")
    assert first.endswith("then retry with `mpiplat cluster images --only pause`")
    assert "compiling" in str(err.value)  # the log's tail follows
    assert [p.name for p in (cache / "images").iterdir() if not p.name.startswith(".pause.lock")] == []


def test_a_missing_build_tool_names_the_debian_package(cache, monkeypatch):
    monkeypatch.setattr(images.shutil, "which", lambda tool: None if tool == "mmdebstrap" else "/usr/bin/" + tool)
    monkeypatch.setattr(images, "key_of", lambda r: "k1")
    with pytest.raises(ImageError) as err:
        images.ensure_built(["openmpi"], stream=io.StringIO())
    assert str(err.value) == (f"building image {images.RECIPES['openmpi'].image} needs mmdebstrap: install the "
                              "Debian package mmdebstrap (apt-get install mmdebstrap), then retry with "
                              "`mpiplat cluster images --only openmpi`")


def test_unknown_image_lists_the_allowed_names(capsys):
    assert cli.main(["cluster", "images", "--only", "nosuch"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unknown image 'nosuch'; allowed: pause, coredns, kueue, jobset, trainer, "
                          "mpi-operator, kueue-previous, jobset-previous, trainer-previous, mpi-operator-previous, "
                          "openmpi, mpich, intel")
    assert len(err.strip().splitlines()) == 1


def test_load_refuses_a_mirror_without_load_and_a_cluster_without_a_real_node(cache, monkeypatch, capsys):
    """`cluster images --load` imports into a running real node only; --image-registry goes with --load. Both
    refusals come before any build (the fake build would record it)."""
    built: list = []
    _fake_build(monkeypatch, built)
    monkeypatch.setenv("MPIPLAT_STATE", str(cache.parent / "state"))  # no cluster's pid files there
    assert cli.main(["cluster", "images", "--only", "pause", "--image-registry", "mirror.example.com/x"]) == 1
    assert capsys.readouterr().err == ("error: --image-registry names the images that --load imports into the real "
                                       "node: give --load too\n")
    assert cli.main(["cluster", "images", "--only", "pause", "--load"]) == 1
    assert capsys.readouterr().err == ("error: cluster mpiplat has no running real node to load images into: run "
                                       "`mpiplat cluster up` first (not --no-real-node)\n")
    assert built == []


def test_local_images_cover_every_implementation_the_job_builder_knows():
    from mpiplat.jobs import IMPLEMENTATIONS

    assert set(images.LOCAL_IMAGES) == set(IMPLEMENTATIONS)
    assert images.PAUSE_IMAGE == "mpiplat.local/pause:1"
    assert sorted(images.LOCAL_IMAGES.values()) == [f"mpiplat.local/{n}:1" for n in ("intel", "mpich", "openmpi")]


# Controller recipe -> the upstream Dockerfile of its image (in the pinned module), whose ENTRYPOINT the
# chart's command (or, for mpi-operator's manifest with no command, the image itself) relies on.
CONTROLLER_DOCKERFILES = {"kueue": "Dockerfile", "jobset": "Dockerfile",
                          "trainer": "cmd/trainer-controller-manager/Dockerfile", "mpi-operator": "Dockerfile"}


def test_controller_images_are_named_by_the_pin_and_run_as_upstream_images_do():
    from mpiplat.versions import load, module_dir

    if shutil.which("go") is None:
        pytest.skip("needs the go command to fetch the pinned modules")
    pins = load()
    for name, dockerfile in CONTROLLER_DOCKERFILES.items():
        r, comp = images.recipe(name), pins[name]
        assert r.kind == "binary" and r.source in comp.binaries
        assert r.image == comp.expand(comp.extra["images"][0])  # what the role passes to the chart
        uid, gid = r.user.split(":")
        assert int(uid) > 0 and int(gid) > 0  # the charts ask runAsNonRoot without a runAsUser
        text = (module_dir(comp) / dockerfile).read_text()
        assert f'ENTRYPOINT {json.dumps(list(r.entrypoint))}' in text, (name, dockerfile)


def test_a_binary_image_has_the_binary_at_its_entrypoint_under_its_parent_dirs(cache, tmp_path, monkeypatch):
    fake = tmp_path / "mpi-operator"
    fake.write_bytes(b"#!/bin/sh\n")
    monkeypatch.setattr(images, "binary_path", lambda name, components=None: fake)
    r = images.recipe("mpi-operator")
    path = images.build_image(r, "k", io.BytesIO())
    files = _blobs(path)
    manifest = json.loads(files[f"blobs/sha256/{images.manifest_digest(path)[7:]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert config["config"]["Entrypoint"] == ["/opt/mpi-operator"] and config["config"]["User"] == "65532:65532"
    layer = gzip.decompress(files[f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}"])
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        assert [(m.name, m.isdir(), m.mode) for m in tar.getmembers()] == [("./opt", True, 0o755),
                                                                          ("./opt/mpi-operator", False, 0o755)]
    index = json.loads(files["index.json"])
    assert index["manifests"][0]["annotations"][images.NAME_ANNOTATION] == "docker.io/mpioperator/mpi-operator:0.8.2"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc (Debian package gcc) for the static pause binary")
def test_pause_image_builds_and_its_binary_exits_0_on_sigterm(cache, tmp_path, capsys):
    assert cli.main(["cluster", "images", "--only", "pause", "--json"]) == 0
    [res] = json.loads(capsys.readouterr().out)["images"]
    assert res["image"] == images.PAUSE_IMAGE and res["built"] is True
    files = _blobs(Path(res["path"]))
    manifest = json.loads(files[f"blobs/sha256/{images.manifest_digest(Path(res['path']))[7:]}"])
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
    assert config["config"]["Entrypoint"] == ["/pause"]
    layer = gzip.decompress(files[f"blobs/sha256/{manifest['layers'][0]['digest'][7:]}"])
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        assert tar.getnames() == ["./pause"]
        binary = tmp_path / "pause"
        binary.write_bytes(tar.extractfile("./pause").read())
    binary.chmod(0o755)
    proc = subprocess.Popen([str(binary)], stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    assert proc.poll() is None  # it waits for a signal
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
    # A second run finds it in the cache.
    assert cli.main(["cluster", "images", "--only", "pause", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["images"][0]["built"] is False


# ---------------------------------------------------------------- importing into containerd

FAKE_CTR = """\
import json, sys, tarfile
state_path = {state!r}
state = json.load(open(state_path))
args = sys.argv[1:]
state["calls"].append(args)
if args[:2] == ["images", "ls"]:
    print("REF TYPE DIGEST SIZE PLATFORMS LABELS")
    for ref, digest in state["images"].items():
        print(f"{{ref}} application/vnd.oci.image.manifest.v1+json {{digest}} 1.0 MiB linux/amd64 -")
elif args[:2] == ["images", "import"]:
    with tarfile.open(args[-1]) as tar:
        desc = json.load(tar.extractfile("index.json"))["manifests"][0]
    state["images"][desc["annotations"]["io.containerd.image.name"]] = desc["digest"]
json.dump(state, open(state_path, "w"))
"""


def test_import_skips_images_containerd_has_at_the_same_digest(cache, tmp_path, monkeypatch):
    _fake_build(monkeypatch, [])
    state = tmp_path / "ctr-state.json"
    state.write_text(json.dumps({"images": {images.PAUSE_IMAGE: "sha256:old"}, "calls": []}))
    script = tmp_path / "fake_ctr.py"
    script.write_text(FAKE_CTR.format(state=str(state)))
    ctr = [sys.executable, str(script)]
    out = io.StringIO()
    assert images.import_into(ctr, ["pause"], stream=out) == [images.PAUSE_IMAGE]
    imports = [c for c in json.loads(state.read_text())["calls"] if c[:2] == ["images", "import"]]
    assert len(imports) == 1
    assert "io.cri-containerd.pinned=pinned" in imports[0]
    assert imports[0][-1] == str(cache / "images" / f"pause-{K1}.tar")
    # containerd now has that digest: a second import does nothing.
    assert images.import_into(ctr, ["pause"], stream=out) == []
    calls = json.loads(state.read_text())["calls"]
    assert sum(c[:2] == ["images", "import"] for c in calls) == 1
    assert f"  present  {images.PAUSE_IMAGE}" in out.getvalue()


def test_each_controller_has_an_on_demand_image_of_its_previous_pin():
    """An upgrade starts from the previous pins' controllers, imaged as the current ones are: same binary and
    entrypoint, the previous version's image name and binary, a cache key of its own."""
    for component, binary, entrypoint in images.CONTROLLERS:
        now, before = images.RECIPES[component], images.RECIPES[f"{component}-previous"]
        previous = load_versions(previous=True)[component]
        assert before.image == previous.expand(previous.extra["images"][0]) != now.image
        assert (before.source, before.entrypoint, before.on_demand) == (binary, (entrypoint,), True)
        assert before.material()["component"] == f"{component}@{previous.version}"
        assert images.cache_key(before, {}) != images.cache_key(now, {})
    assert "kueue-previous" not in [r.name for r in images._select(None)]  # `up` builds the current ones only
