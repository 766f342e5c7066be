"""scrapyd end to end, the README's way, on a scrapyd that runs only the egg.

A real ``scrapyd`` listens on a loopback port, in an environment that holds
the requirements but not the project (the test proves it cannot import
``webcrawl``, ``extensions`` or ``pipelines``), so every job runs the code of
the egg that ``scrapyd-deploy local`` built from a clean copy of the project.
Jobs are scheduled through ``schedule.json`` with ``setting=`` overrides,
watched through ``listjobs.json`` and judged on the page store, the job's log
and scrapyd's own record of the process's exit: one job gets its Redis URL
with ``setting=``, one from ``REDIS_URL_FILE`` in scrapyd's environment (its
password must show in no log), one fails at start (exit 1, and the embedded
Redis it started is gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis
from scrapy.settings import Settings

from extensions.connection.embedded import RedisProcess, free_port
from pipelines.stores import store_from_settings
from sandbox.process import SandboxProcess
from sandbox.resolver import SANDBOX_RESOLVER
from sandbox.site import SiteSpec
from tests.support.fleet import push_seeds
from tests.support.localcrawl import sandbox_settings
from tests.support.packaging import SHIPPED, clean_copy, dev_tool

if TYPE_CHECKING:
    from collections.abc import Iterator

# The module's scrapyd (a fixture) starts once: in one pytest-xdist process.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("scrapyd")]

SECRET = "s3cret-in-a-file"
# Seconds an HTTP call to scrapyd may take (it was 10: too few for
# listspiders.json while the tests load both cores).
HTTP_TIMEOUT = 60


class Scrapyd:
    """A ``scrapyd`` process and its directories under ``root``."""

    def __init__(self, root: Path, python: Path, env: dict[str, str]) -> None:
        self.root = root
        self.python = python
        self.env = env
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = root / "scrapyd.log"
        # Where the jobs read REDIS_URL from when no setting= gives it (an
        # empty file: none, the embedded Redis).
        self.redis_url_file = Path(env["REDIS_URL_FILE"])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> None:
        # scrapyd cannot report a port it picked itself: take a free one and
        # try another if it was taken in the meantime.
        for _attempt in range(3):
            self.port = free_port()
            (self.root / "scrapyd.conf").write_text(
                "[scrapyd]\n"
                "bind_address = 127.0.0.1\n"
                f"http_port = {self.port}\n"
                f"eggs_dir = {self.root / 'eggs'}\n"
                f"logs_dir = {self.root / 'logs'}\n"
                f"dbs_dir = {self.root / 'dbs'}\n"
                "items_dir =\n"
                "max_proc = 2\n"
                "poll_interval = 0.5\n"
            )
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [str(self.python), "-m", "scrapyd"],
                    cwd=self.root,  # scrapyd reads ./scrapyd.conf
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if self.get("daemonstatus.json")["status"] == "ok":
                        return
                except OSError:
                    time.sleep(0.2)
        raise RuntimeError(f"scrapyd did not start: {self.log_path.read_text()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        # listspiders.json and schedule.json answer once a `scrapy list` or
        # the job's process has started: seconds, on a loaded machine more.
        with urllib.request.urlopen(self.url + path + query, timeout=HTTP_TIMEOUT) as r:
            return json.loads(r.read())

    def schedule(self, settings: dict[str, object]) -> str:
        """``curl URL/schedule.json -d project=webcrawl -d spider=web -d
        setting=NAME=value ...``, as the README says."""
        form = [("project", "webcrawl"), ("spider", "web")]
        form += [("setting", f"{name}={value}") for name, value in settings.items()]
        data = urllib.parse.urlencode(form).encode()
        with urllib.request.urlopen(
            self.url + "schedule.json", data, timeout=HTTP_TIMEOUT
        ) as r:
            answer = json.loads(r.read())
        assert answer["status"] == "ok", answer
        return str(answer["jobid"])

    def wait_finished(self, job: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            jobs = self.get("listjobs.json", project="webcrawl")
            if any(j["id"] == job for j in jobs["finished"]):
                return
            time.sleep(0.5)
        raise AssertionError(f"job {job} still not finished after {timeout}s")

    def job_log(self, job: str) -> str:
        return (self.root / "logs" / "webcrawl" / "web" / f"{job}.log").read_text()

    def process_outcome(self, job: str) -> str:
        """scrapyd's own line on how the job's process ended."""
        for line in self.log_path.read_text().splitlines():
            if f"job={job!r}" in line and (
                "Process finished" in line or "died" in line
            ):
                return line
        raise AssertionError(f"scrapyd logged no end for job {job}")


def requirements_only_python(root: Path) -> Path:
    """A Python that sees the installed requirements but not the project.

    A venv whose one ``.pth`` line names the development environment's
    site-packages: the packages installed there are importable, but the
    ``.pth`` files in that directory (an editable install of the project, as
    ``pip install -e .`` leaves) are not processed.
    """
    env_dir = root / "env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env_dir)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    site = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    paths = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (env_dir / site.removeprefix(str(env_dir) + "/") / "requirements.pth").write_text(
        "\n".join(sorted(paths)) + "\n"
    )
    return env_dir / "bin" / "python"


@pytest.fixture(scope="module")
def scrapyd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrapyd]:
    root = tmp_path_factory.mktemp("scrapyd")
    python = requirements_only_python(root)
    # The sandbox web is this test's internet: its resolver (and nothing else
    # of this repository) is put on the jobs' path, as the stand-in for DNS.
    project = clean_copy(root / "src")
    fixtures = root / "fixtures"
    shutil.copytree(project / "sandbox", fixtures / "sandbox")
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONPATH", "WEBCRAWL_HOME")
        and not name.startswith(("SCRAPY", "REDIS_URL", "MONGO_URI"))
    }
    secrets = root / "secrets"
    secrets.mkdir()
    (secrets / "redis_url").write_text("")
    env.update(
        REDIS_URL_FILE=str(secrets / "redis_url"),
        PYTHONPATH=str(fixtures),
        HOME=str(root),  # no ~/.scrapyd.conf of the machine's user
        PATH=os.pathsep.join([str(python.parent), env.get("PATH", "")]),
    )
    probe = subprocess.run(
        [str(python), "-c",
         "import importlib.util as u, scrapy, scrapyd, redis, sandbox.resolver; "
         f"print([m for m in {SHIPPED!r} if u.find_spec(m)])"],
        check=False, cwd=root, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "[]", "scrapyd's environment holds the project"
    server = Scrapyd(root, python, env)
    server.start()
    try:
        deploy(server, project)
        yield server
    finally:
        server.stop()


def deploy(server: Scrapyd, project: Path) -> None:
    """``scrapyd-deploy local`` from the project, its target pointed at us."""
    cfg = project / "scrapy.cfg"
    cfg.write_text(
        re.sub(r"(?m)^url = .*$", f"url = {server.url}", cfg.read_text(), count=1)
    )
    out = subprocess.run(
        [dev_tool("scrapyd-deploy"), "local"],
        check=False, cwd=project, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert '"status": "ok"' in out.stdout, out.stdout + out.stderr
    assert server.get("listspiders.json", project="webcrawl")["spiders"] == ["web"]


def crawl(
    scrapyd: Scrapyd, redis_url: str, tmp_path: Path, settings: dict[str, object]
) -> str:
    """Crawl a small sandbox web through one scrapyd job; return the job's log
    once every reachable page is checked to be in the store."""
    spec = SiteSpec(seed=5, hosts=4, pages_per_host=6)
    settings = {
        "TWISTED_DNS_RESOLVER": SANDBOX_RESOLVER,
        "DOWNLOAD_DELAY": 0.05,
        **settings,
    }
    with SandboxProcess(spec, directory=tmp_path, max_seconds=400) as web:
        push_seeds(redis_url, web.seed_urls())
        job = scrapyd.schedule(settings)
        scrapyd.wait_finished(job)
        expected = spec.reachable_urls(web.port)
    log = scrapyd.job_log(job)
    assert "Process finished" in scrapyd.process_outcome(job), log[-3000:]
    assert not re.search(r"\] (ERROR|CRITICAL):|Traceback", log), log[-3000:]
    store = store_from_settings(Settings({"WEBCRAWL_HOME": settings["WEBCRAWL_HOME"]}))
    store.open()
    try:
        pages = {url: store.get_page(url) for url in expected}
    finally:
        store.close()
    assert expected and all(p is not None for p in pages.values())
    assert all(p.metadata["status"] == 200 for p in pages.values() if p)
    return log


def test_deployed_egg_crawls_the_sandbox(
    scrapyd: Scrapyd, redis_url: str, tmp_path: Path
) -> None:
    scrapyd.redis_url_file.write_text("")
    crawl(scrapyd, redis_url, tmp_path, sandbox_settings(redis_url, tmp_path / "home"))


def test_redis_password_from_a_file_stays_out_of_the_logs(
    scrapyd: Scrapyd, tmp_path: Path
) -> None:
    """The README's way to keep the password out of scrapyd's log and ``ps``:
    scrapyd started with ``REDIS_URL_FILE``, no ``setting=REDIS_URL``."""
    with RedisProcess(tmp_path / "redis", appendonly=False) as server:
        redis.Redis.from_url(server.url).config_set("requirepass", SECRET)
        # "default:": redis-cli 6.2 sends an empty user name as one.
        url = f"redis://default:{SECRET}@127.0.0.1:{server.port}/0"
        scrapyd.redis_url_file.write_text(url + "\n")
        settings = sandbox_settings(url, tmp_path / "home")
        del settings["REDIS_URL"]
        log = crawl(scrapyd, url, tmp_path, settings)
    assert SECRET not in log
    assert SECRET not in scrapyd.log_path.read_text()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_job_that_fails_at_start_is_a_failure_and_leaves_no_redis(
    scrapyd: Scrapyd, tmp_path: Path
) -> None:
    # No REDIS_URL: the job starts the embedded Redis, then cannot open its
    # store (its directory is a file) and the crawl fails before it opens.
    scrapyd.redis_url_file.write_text("")
    home = tmp_path / "home"
    (tmp_path / "not-a-dir").write_text("")
    bad_store = tmp_path / "not-a-dir" / "pages.sqlite3"
    job = scrapyd.schedule({"WEBCRAWL_HOME": home, "SQLITE_PATH": bad_store})
    scrapyd.wait_finished(job)
    assert "exitstatus=1" in scrapyd.process_outcome(job)
    redis_log = (home / "redis" / "redis.log").read_text()
    # Each line starts with the pid of its process, "M" for the server itself.
    pids = {int(p) for p in re.findall(r"(?m)^(\d+):M ", redis_log)}
    assert pids, redis_log  # the job did start the embedded Redis
    orphans = [pid for pid in pids if alive(pid)]
    for pid in orphans:  # never leave one behind, even when failing
        os.kill(pid, signal.SIGTERM)
    assert not orphans
    log = scrapyd.job_log(job)
    assert str(bad_store) in log
    assert "The crawl failed at start: stopped the embedded Redis" in log


def test_job_whose_redis_refuses_is_a_failure(scrapyd: Scrapyd, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    job = scrapyd.schedule(
        {"REDIS_URL": f"redis://127.0.0.1:{port}/0", "WEBCRAWL_HOME": tmp_path}
    )
    scrapyd.wait_finished(job, timeout=120)
    # The add-on refuses an unreachable Redis with exit status 2 (a start-up
    # failure, like a bad setting); what matters to scrapyd is "not 0".
    assert "exitstatus=2" in scrapyd.process_outcome(job)
    log = scrapyd.job_log(job)
    # One line at ERROR level or above says which Redis could not be reached.
    assert re.search(rf"\] (ERROR|CRITICAL): .*127\.0\.0\.1:{port}", log), log[-3000:]


def readme_scrapyd_script() -> str:
    """The one shell block of the README's "scrapyd" section."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("\n### scrapyd\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 1, "the scrapyd section holds one shell block"
    return str(blocks[0])


def test_the_readmes_scrapyd_steps_run_as_written(
    redis_url: str, tmp_path: Path
) -> None:
    """Issue 21: followed literally, the steps failed (``cat:
    /run/secrets/redis_url: No such file or directory``, then ``Invalid URI
    scheme``): they used what no step had made. The README's block runs here
    as written (``bash -e``), from a clean copy of the project, on loopback:
    it configures and starts scrapyd, deploys, seeds, schedules and waits.
    Only its variables are set (where scrapyd lives and listens, the Redis,
    the seeds and the job's settings: the sandbox web's, whose names no DNS
    knows). scrapyd itself runs on a Python that has the requirements, not
    the project, as ``scrapyd`` on the PATH."""
    root = tmp_path / "machine"
    root.mkdir()
    python = requirements_only_python(root)
    project = clean_copy(root / "clone")
    fixtures = root / "fixtures"
    shutil.copytree(project / "sandbox", fixtures / "sandbox")
    tools = root / "bin"
    tools.mkdir()
    (tools / "scrapyd").write_text(f'#!/bin/sh\nexec "{python}" -m scrapyd "$@"\n')
    (tools / "scrapyd").chmod(0o755)
    scrapyd_dir = tmp_path / "scrapyd"
    home = tmp_path / "crawl-home"
    spec = SiteSpec(seed=5, hosts=3, pages_per_host=4)
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("PYTHONPATH", "WEBCRAWL_HOME")
        and not name.startswith(("SCRAPY", "REDIS_URL", "MONGO_URI"))
    }
    env.update(
        HOME=str(root),
        PYTHONPATH=str(fixtures),  # the sandbox's resolver, for the jobs
        PATH=os.pathsep.join([str(tools), str(Path(sys.executable).parent),
                              env.get("PATH", "")]),
        SCRAPYD_DIR=str(scrapyd_dir),
        SCRAPYD_PORT=str(free_port()),
        CRAWL_REDIS_URL=redis_url,
        JOB_SETTINGS=" ".join([
            f"WEBCRAWL_HOME={home}", "MAX_IDLE_TIME_BEFORE_CLOSE=2",
            "PIPELINE_FLUSH_INTERVAL=0.5",
            "DOWNLOAD_DELAY=0.05", f"TWISTED_DNS_RESOLVER={SANDBOX_RESOLVER}",
            "ALLOW_PRIVATE_ADDRESSES=True", "WEB_ALLOWED_DOMAINS=sandbox.test",
        ]),
    )  # fmt: skip
    try:
        with SandboxProcess(spec, directory=tmp_path, max_seconds=400) as web:
            env["SEEDS"] = " ".join(web.seed_urls())
            done = subprocess.run(
                ["bash", "-e", "-c", readme_scrapyd_script()],
                cwd=project, env=env, capture_output=True, text=True,
                timeout=400, check=False,
            )  # fmt: skip
            expected = spec.reachable_urls(web.port)
    finally:
        pid_file = scrapyd_dir / "scrapyd.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
    log = (scrapyd_dir / "scrapyd.log").read_text() if scrapyd_dir.exists() else ""
    assert done.returncode == 0, done.stdout + done.stderr + log[-3000:]
    assert "Process finished" in done.stdout, done.stdout
    store = store_from_settings(Settings({"WEBCRAWL_HOME": str(home)}))
    store.open(create=False)
    try:
        missing = [url for url in expected if store.get_page(url) is None]
    finally:
        store.close()
    assert expected and not missing, missing
    # The Redis URL reached the jobs from the file the steps wrote.
    assert (scrapyd_dir / "redis_url").read_text().strip() == redis_url
    assert redis_url not in log
