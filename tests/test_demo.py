"""``python -m demo`` (``make demo``), the first command a newcomer runs.

Interrupted mid-crawl, by Ctrl-C (SIGINT to the terminal's whole foreground
process group) or by ``kill`` (SIGTERM to the demo alone), it stops every
process it started (the workers, the sandbox web, the embedded Redis, which
runs daemonized) and says so in one line, with no traceback. The processes
are found by a marker in their environment, which every descendant inherits;
redis-server, which writes its title over its environment, by its pid file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MARKER = "WEBCRAWL_DEMO_TEST_MARKER"


def marked_pids(marker: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment has
    ``MARKER=marker`` (zombies have no environment and are skipped)."""
    found = {}
    needle = f"{MARKER}={marker}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if needle in environ.split(b"\0"):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode()
    return found


def alive(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(")")[1].startswith(" Z")
    except FileNotFoundError:
        return False


def wait_for(condition, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def kill_leftovers(marker: str, redis_pid_file: Path) -> None:
    pids = list(marked_pids(marker))
    if redis_pid_file.exists():
        pids.append(int(redis_pid_file.read_text()))
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_an_interrupted_demo_stops_everything_it_started(
    tmp_path: Path, sig: signal.Signals
) -> None:
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        "WEBCRAWL_HOME": str(tmp_path),
        # Long enough to be interrupted mid-crawl: 20 s at the least.
        "DEMO_HOSTS": "4",
        "DEMO_PAGES": "20",
        "DEMO_DELAY": "1",
        MARKER: marker,
    }
    record = tmp_path / "demo" / "requests.jsonl"
    redis_pid_file = tmp_path / "demo" / "redis" / "redis.pid"

    def fetching() -> bool:
        workers = [c for c in marked_pids(marker).values() if "crawl web" in c]
        lines = record.read_text().splitlines() if record.exists() else []
        return len(workers) == 2 and any("/robots.txt" not in x for x in lines)

    proc = subprocess.Popen(
        [sys.executable, "-m", "demo"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        wait_for(fetching, 120, "two workers fetching pages")
        started = marked_pids(marker)
        assert any("-m sandbox" in c for c in started.values()), started
        redis_pid = int(redis_pid_file.read_text())
        assert alive(redis_pid)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C in a terminal
        else:
            proc.send_signal(sig)  # kill PID
        out, _ = proc.communicate(timeout=90)
        try:
            wait_for(
                lambda: not marked_pids(marker) and not alive(redis_pid),
                30,
                "every process to end",
            )
        except AssertionError:
            raise AssertionError(
                f"left running: {marked_pids(marker)}, "
                f"redis-server: {alive(redis_pid)}\n{out}"
            ) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        kill_leftovers(marker, redis_pid_file)
    assert "Traceback" not in out, out
    stopped = [line for line in out.splitlines() if line.startswith("Interrupted")]
    assert len(stopped) == 1, out
    assert "stopped" in stopped[0], out
    assert proc.returncode == 128 + sig, out
