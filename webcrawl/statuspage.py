"""The live status page of ``scrapy status --serve PORT``.

One self-contained HTML page (inline CSS and JS, no external assets) that
polls ``/status.json`` (the object ``scrapy status --json`` prints, plus
``history``) and draws the fleet's pages/s (its 1-minute rate, sampled by the
server every poll interval since it started) as an inline SVG line. The
server is the standard library's threading HTTP server: each poll reads Redis
afresh.

Settings read: those of :func:`webcrawl.operate.gather_status`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from extensions.connection import TRANSIENT_REDIS_ERRORS
from extensions.extensions.fleetstats import fleet_view
from webcrawl.operate import client_for, dumps, gather_status

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)

HISTORY = 1800  # samples the chart keeps (an hour at the default 2 s)

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>webcrawl status</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 8px}
.grid{display:grid;grid-template-columns:repeat(4,minmax(150px,1fr));gap:8px;max-width:980px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 10px}
.card b{display:block;font-size:22px}
.card span{color:#666;font-size:12px}
table{border-collapse:collapse;margin-top:6px;background:#fff}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;font-size:13px}
#paused{color:#b00;font-weight:bold}
#chart{background:#fff;border:1px solid #ddd;border-radius:6px;margin-top:10px}
.muted{color:#777;font-size:12px}
</style></head>
<body data-polls="0">
<h1>webcrawl: crawl <span id="crawl">-</span> <span id="paused"></span></h1>
<div class="muted">updated <span id="updated">never</span>; polling /status.json
every <span id="every">-</span> s</div>
<div class="grid" style="margin-top:8px">
<div class="card"><b id="rate1">-</b><span>pages/s (1 min)</span></div>
<div class="card"><b id="rate5">-</b><span>pages/s (5 min)</span></div>
<div class="card"><b id="rate15">-</b><span>pages/s (15 min)</span></div>
<div class="card"><b id="nworkers">-</b><span>workers alive</span></div>
<div class="card"><b id="queued">-</b><span>requests queued</span></div>
<div class="card"><b id="leased">-</b><span>leases outstanding</span></div>
<div class="card"><b id="hosts">-</b><span>hosts ready / waiting / parked</span></div>
<div class="card"><b id="dlq">-</b><span>dead-letter queue</span></div>
<div class="card"><b id="pages_stored">-</b><span>pages stored</span></div>
<div class="card"><b id="pages_fetched">-</b><span>pages fetched (fleet)</span></div>
<div class="card"><b id="bloom">-</b><span>Bloom fill / expected FP rate</span></div>
<div class="card"><b id="memory">-</b><span>Redis memory</span></div>
</div>
<div id="seeds" style="color:#b00"></div>
<svg id="chart" width="980" height="200" viewBox="0 0 980 200">
<text x="8" y="16" font-size="12" fill="#666">pages/s (fleet, 1-minute rate), last
<tspan id="span">0</tspan> s; max <tspan id="ymax">0</tspan></text>
<polyline id="line" fill="none" stroke="#2a6fdb" stroke-width="2" points=""/>
</svg>
<h3>Workers</h3>
<table><thead><tr><th>id</th><th>machine</th><th>pid</th><th>last beat</th>
<th>pages/s</th><th>metrics port</th></tr></thead><tbody id="workers"></tbody></table>
<h3>Top hosts by queue</h3>
<table><tbody id="top"></tbody></table>
<h3>Host overrides (scrapy hosts)</h3>
<table><thead><tr><th>host</th><th>delay s</th><th>concurrency</th>
<th>max pages</th></tr></thead><tbody id="overrides"></tbody></table>
<script>
const EVERY = __EVERY__;
const points = [];  // [Redis time ms, pages/s]
let last = null;
const $ = (id) => document.getElementById(id);
const fmt = (n) => (n === null || n === undefined) ? "-"
  : Number(n).toLocaleString("en-US");
function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.appendChild(td);
}
function draw() {
  const w = 980, h = 200, pad = 24;
  const ymax = Math.max(1, ...points.map(p => p[1]));
  const t0 = points.length ? points[0][0] : 0;
  const t1 = points.length ? points[points.length - 1][0] : 1;
  const span = Math.max(1, t1 - t0);
  $("line").setAttribute("points", points.map(p =>
    ((p[0] - t0) / span * (w - 2 * pad) + pad).toFixed(1) + "," +
    (h - pad - p[1] / ymax * (h - 2 * pad)).toFixed(1)).join(" "));
  $("span").textContent = Math.round(span / 1000);
  $("ymax").textContent = ymax.toFixed(1);
}
function show(s) {
  $("crawl").textContent = s.crawl;
  $("paused").textContent = s.paused ? "PAUSED" : "";
  const r = s.rates.pages || {};
  $("rate1").textContent = (r["1m"] || 0).toFixed(2);
  $("rate5").textContent = (r["5m"] || 0).toFixed(2);
  $("rate15").textContent = (r["15m"] || 0).toFixed(2);
  $("nworkers").textContent = s.workers.length;
  $("queued").textContent = fmt(s.queued);
  $("leased").textContent = fmt(s.leased);
  $("hosts").textContent =
    s.hosts.ready + " / " + s.hosts.waiting + " / " + s.hosts.parked;
  $("dlq").textContent = fmt(s.dlq);
  $("pages_stored").textContent = fmt(s.pages_stored);
  $("pages_fetched").textContent = fmt(s.totals.pages || 0);
  $("bloom").textContent = s.bloom ? (100 * s.bloom.fill).toFixed(3) + "% / " +
    s.bloom.expected_fp_rate.toExponential(1) : "-";
  $("memory").textContent = s.redis.used_memory_human;
  $("seeds").textContent = s.waiting_for_seeds ?
    "No seeds: workers are waiting. Push some with `scrapy seed FILE`." : "";
  const tb = $("workers"); tb.textContent = "";
  for (const wk of s.workers) {
    const row = document.createElement("tr");
    for (const v of [wk.id, wk.machine, wk.pid, wk.last_beat_s + " s ago",
                     wk.pages_per_s, wk.metrics_port || "-"]) cell(row, v);
    tb.appendChild(row);
  }
  const top = $("top"); top.textContent = "";
  for (const t of s.top_hosts) {
    const row = document.createElement("tr");
    cell(row, t.queued);
    cell(row, t.host);
    top.appendChild(row);
  }
  const ov = $("overrides"); ov.textContent = "";
  for (const [host, o] of Object.entries(s.host_overrides || {})) {
    const row = document.createElement("tr");
    for (const v of [host, o.delay, o.concurrency, o.max_pages]) {
      cell(row, v === undefined ? "-" : v);
    }
    ov.appendChild(row);
  }
  // the server samples the fleet's 1-minute rate (Redis clock) since it
  // started; this page adds its own polls in between
  if (s.history) { points.length = 0; points.push(...s.history); }
  else if (!last || s.time_ms > last) {
    points.push([s.time_ms, r["1m"] || 0]);
    if (points.length > 600) points.shift();
  }
  last = s.time_ms;
  draw();
  $("updated").textContent =
    new Date(s.time_ms).toISOString().substring(11, 19) + " UTC";
  document.body.dataset.polls = Number(document.body.dataset.polls) + 1;
}
async function poll() {
  try {
    const res = await fetch("status.json", {cache: "no-store"});
    if (res.ok) show(await res.json());
  } catch (e) { $("updated").textContent = "error: " + e; }
  setTimeout(poll, EVERY * 1000);
}
$("every").textContent = EVERY;
poll();
</script>
</body></html>
"""


def page(every: float) -> bytes:
    """The HTML page, polling every ``every`` seconds."""
    return PAGE.replace("__EVERY__", repr(float(every))).encode()


class StatusServer(ThreadingHTTPServer):
    """Serves the page and ``/status.json``; a sampler thread records the
    fleet's 1-minute pages/s every ``every`` seconds (the chart's history,
    so a page opened late still shows the last ``HISTORY`` samples)."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], settings: BaseSettings, crawl: str, every: float
    ) -> None:
        super().__init__(address, _Handler)
        self.settings = settings
        self.crawl = crawl
        self.every = every
        self.page = page(every)
        self.history: deque[tuple[int, float]] = deque(maxlen=HISTORY)
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        alive_ms = int(self.settings.getfloat("FRONTIER_LEASE_TIMEOUT") * 1000)

        async def rate() -> tuple[int, float]:
            client = client_for(self.settings)
            try:
                view = await fleet_view(client, self.crawl, alive_ms)
            finally:
                await client.aclose()
            return view.now_ms, view.rates["pages"]["1m"]

        while not self._stop.is_set():
            try:
                self.history.append(asyncio.run(rate()))
            except TRANSIENT_REDIS_ERRORS as exc:
                logger.debug("status sample skipped: %s", exc)
            self._stop.wait(self.every)

    def server_close(self) -> None:
        self._stop.set()
        super().server_close()


class _Handler(BaseHTTPRequestHandler):
    server: StatusServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/", "/index.html"):
            self._send(200, "text/html; charset=utf-8", self.server.page)
        elif path == "/status.json":
            try:
                status = asyncio.run(
                    gather_status(self.server.settings, self.server.crawl)
                )
            except TRANSIENT_REDIS_ERRORS as exc:
                body = f'{{"error": "Redis unreachable: {type(exc).__name__}"}}'
                self._send(503, "application/json", body.encode())
                return
            status["history"] = list(self.server.history)
            self._send(200, "application/json", dumps(status).encode())
        else:
            self._send(404, "text/plain", b"not found\n")

    def _send(self, code: int, ctype: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("status page: " + format, *args)
