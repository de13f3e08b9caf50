"""Owned temp names: leftovers of killed writers are recognised (dead owner or too old) and removed."""

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path


from pipeline import temp_paths
from pipeline.atomic import atomic_write_text
from pipeline.synthetic import SyntheticSpec, generate


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


def _temp(folder: Path, name: str, pid: int, host: str | None = None, is_dir: bool = True) -> Path:
    path = folder / f".{name}.tmp-{pid}@{host or temp_paths._host()}.abc123xy"
    if is_dir:
        (path / "raw").mkdir(parents=True)
    else:
        path.write_bytes(b"half")
    return path


def test_temp_names_carry_pid_and_host_even_with_dotted_hosts(tmp_path):
    fd, path = temp_paths.make_temp_file(tmp_path / "report.json")
    os.close(fd)
    assert path.name.startswith(f".report.json.tmp-{os.getpid()}@")
    assert temp_paths.owner_of(path) == temp_paths.Owner(os.getpid(), temp_paths._host())
    assert temp_paths.owner_of(tmp_path / ".x.tmp-12@node1.cluster.org.q1w2e3r4") == temp_paths.Owner(12, "node1.cluster.org")
    assert temp_paths.owner_of(tmp_path / ".x.tmp-q1w2e3r4") is None  # older, unowned name
    assert temp_paths.is_temp(tmp_path / ".x.tmp-q1w2e3r4") and not temp_paths.is_temp(tmp_path / "x.tmp-1@h.r")


def test_stale_means_owner_dead_on_this_host_or_older_than_two_days(tmp_path):
    dead = _temp(tmp_path, "a", _dead_pid())
    live = _temp(tmp_path, "b", os.getpid())
    elsewhere = _temp(tmp_path, "c", _dead_pid(), host="another-host")
    old = _temp(tmp_path, "d", os.getpid(), host="another-host")
    legacy = tmp_path / ".e.tmp-q1w2e3r4"
    legacy.mkdir()
    for path in (old, legacy):
        past = time.time() - temp_paths.MAX_AGE_S - 60
        os.utime(path, (past, past))
    (tmp_path / "kept").mkdir()
    assert temp_paths.stale_temps(tmp_path) == sorted([dead, old, legacy])
    assert temp_paths.remove_stale(tmp_path) == sorted([dead, old, legacy])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, elsewhere.name, "kept"])


def test_atomic_write_removes_stale_temps_beside_it_and_keeps_live_ones(tmp_path):
    dead = _temp(tmp_path, "metrics.csv", _dead_pid(), is_dir=False)
    live = _temp(tmp_path, "metrics.csv", os.getpid(), is_dir=False)
    atomic_write_text(tmp_path / "metrics.csv", "epoch\n")
    assert not dead.exists() and live.exists()


GENERATE_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import pipeline.ogb_layout as layout
    from pipeline.synthetic import SyntheticSpec, generate

    def stall(path, *args, **kwargs):  # the first raw file: the temp folder exists now
        print("TEMP", path.parent.parent, flush=True)
        time.sleep(120)

    layout.to_csv_gz = stall
    generate(Path(sys.argv[1]), SyntheticSpec(num_nodes=300, num_edges=1200, num_features=4, num_classes=3))
    """
)


def _line(proc: subprocess.Popen, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no output within {timeout}s"
    return proc.stdout.readline()


def test_generation_killed_with_sigkill_leaves_a_temp_the_next_generation_removes(tmp_path):
    folder = tmp_path / "synthetic" / "twin"
    proc = subprocess.Popen([sys.executable, "-c", GENERATE_SCRIPT, str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        line = _line(proc, timeout=120)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and line.startswith("TEMP ")
    temp = Path(line.split(" ", 1)[1].strip())
    assert temp.is_dir() and temp_paths.owner_of(temp).pid == proc.pid and not folder.exists()
    generate(tmp_path / "synthetic" / "other", SyntheticSpec(num_nodes=30, num_edges=60, num_features=0, num_classes=2))
    assert not temp.exists()
    assert sorted(p.name for p in folder.parent.iterdir()) == ["other"]


def test_cache_clear_removes_stale_temps_of_generations(capsys, tmp_path, monkeypatch):
    from gnnkit.cli import main

    monkeypatch.setenv("GNNKIT_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("GNNKIT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "data" / "synthetic").mkdir(parents=True)
    dead = _temp(tmp_path / "data" / "synthetic", "synthetic-arxiv-0123", _dead_pid())
    live = _temp(tmp_path / "data" / "synthetic", "synthetic-arxiv-4567", os.getpid())
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert f"STALE    {dead}" in out and str(live) not in out
    assert main(["cache", "clear"]) == 0
    assert not dead.exists() and live.exists()


def test_a_published_folder_has_the_mode_mkdir_gives(tmp_path):
    """mkdtemp's 0700 stayed on a published cache entry: in a shared GNNKIT_HOME only its builder read it."""
    old = os.umask(0o022)
    try:
        with temp_paths.published_folder(tmp_path / "entry") as folder:
            (folder / "a").write_text("x")
        assert (tmp_path / "entry").stat().st_mode & 0o777 == 0o755
        os.umask(0o077)
        with temp_paths.published_folder(tmp_path / "private") as folder:
            pass
        assert (tmp_path / "private").stat().st_mode & 0o777 == 0o700
    finally:
        os.umask(old)


def test_the_umask_is_read_without_setting_it(monkeypatch):
    """os.umask reads it by setting it to 0 for a moment: another thread's files were anyone's."""
    old = os.umask(0o027)
    try:
        calls = []
        real = os.umask
        monkeypatch.setattr(os, "umask", lambda mask: calls.append(mask) or real(mask))
        assert temp_paths.current_umask() == 0o027 and calls == []
    finally:
        os.umask(old)
