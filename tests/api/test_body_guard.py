"""Finding 1: a huge body must not be read (unauthenticated) or parsed on the event loop (authenticated).

Runs a real uvicorn on 127.0.0.1 in a subprocess (stopped at the end), streams a 63 MB
`{"texts":[{},{},...]}` body at /v1/jobs from a raw socket, and meanwhile polls /healthz and the server's
RSS. Today's main read the whole body and json.loads'ed it on the loop: +1.6 GB and /healthz frozen 4.7 s.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

BODY_BYTES = 63_000_000  # under HERO_JOB_MAX_BODY_BYTES (64 MB), as in the report


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


@pytest.fixture
def server(tmp_path):
    port = _free_port()
    env = dict(os.environ, HERO_HOME=str(tmp_path / "home"), HERO_DEV_MODE="1",
               HERO_DATABASE_URL=f"sqlite:///{tmp_path / 'srv.db'}", HERO_LOG_LEVEL="WARNING")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "verifier.api.app:app_from_env", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 600  # polled: a bound for a loaded machine, not a speed target
        while True:
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"server did not start: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        yield base, port, proc, env
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


ATTACK = r"""
import json, socket, sys
port, headers, body_bytes = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
unit = b"{}," * (1 << 18)
n = body_bytes // len(unit)
head, tail = b'{"texts":[', b"{}]}"
length = len(head) + n * len(unit) + len(tail)
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(30)
out = {}
try:
    s.sendall(("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers
               + "Content-Length: %d\r\n\r\n" % length).encode() + head)
    for _ in range(n):
        s.sendall(unit)
    s.sendall(tail)
except OSError:
    out["hung_up_while_sending"] = True
try:
    data = s.recv(4096)
    out["status"] = int(data.split(b" ", 2)[1]) if data else None
except OSError:
    out["status"] = None
print(json.dumps(out))
"""


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used: the work it did, whatever the machine's load."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _healthz(c: httpx.Client, base: str) -> float:
    t0 = time.perf_counter()
    assert c.get(base + "/healthz").status_code == 200
    return time.perf_counter() - t0


def _run(base: str, port: int, proc, headers: str, script: str = ATTACK, size: int = BODY_BYTES) -> dict:
    """Streams a 63 MB body of empty objects (or runs another attack `script`) from another process while this
    one polls /healthz and RSS."""
    with httpx.Client(timeout=5) as c:
        idle = []
        for _ in range(10):  # the machine's own noise, for the record
            idle.append(_healthz(c, base))
            time.sleep(0.02)
        rss0, cpu0 = _rss_mb(proc.pid), _cpu_s(proc.pid)
        attacker = subprocess.Popen([sys.executable, "-c", script, str(port), headers, str(size)],
                                    stdout=subprocess.PIPE, text=True)
        worst, peak = 0.0, rss0
        while attacker.poll() is None:
            worst = max(worst, _healthz(c, base))
            peak = max(peak, _rss_mb(proc.pid))
            time.sleep(0.05)
        for _ in range(10):  # the parse may still be finishing after the last byte was sent
            peak = max(peak, _rss_mb(proc.pid))
            worst = max(worst, _healthz(c, base))
            time.sleep(0.1)
        cpu = _cpu_s(proc.pid) - cpu0
    result = json.loads(attacker.stdout.read())
    return {**result, "rss_growth_mb": peak - rss0, "worst_healthz_s": worst, "idle_worst_s": max(idle),
            "server_cpu_s": cpu}


def test_unauthenticated_63mb_body_is_never_read(server):
    base, port, proc, _ = server
    out = _run(base, port, proc, "")
    assert out["status"] in (401, None), out  # 401 sent before the body; the client may see the hang-up first
    assert out["rss_growth_mb"] < 100, out
    assert out["worst_healthz_s"] < 0.2 + 5 * out["idle_worst_s"], out  # scaled by this machine's own noise
    metrics = httpx.get(base + "/metrics").text
    assert 'hero_body_rejections_total{reason="unauthenticated"} 1.0' in metrics


def test_authenticated_63mb_nested_body_is_refused_without_building_it(server):
    from verifier.auth.devkeys import mint_token
    from verifier.base.settings import Settings

    base, port, proc, env = server
    settings = Settings(home=Path(env["HERO_HOME"]), dev_mode=True)
    token = mint_token(settings, "moderator", "mallory", settings.jwt_max_ttl_seconds)
    out = _run(base, port, proc, f"Authorization: Bearer {token}\r\n")
    assert out["status"] == 422, out
    # The body itself (63 MB, within HERO_JOB_MAX_BODY_BYTES) is held once; nothing is built from it.
    assert out["rss_growth_mb"] < 100 + BODY_BYTES / 2**20, out
    # Copying 63 MB in and decoding it happen in C either way; parsing runs in a thread. Measured 0.08 s on an
    # idle 2-core machine, up to 0.4 s at load average 12; today's main: > 4 s. The bound leaves CI headroom.
    assert out["worst_healthz_s"] < 1.0 + 5 * out["idle_worst_s"], out  # a loaded machine's noise on top


INTS = r"""
import json, socket, sys, time
port, headers, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
body = ('{"texts":[' + ",".join(["1"] * n) + "]}").encode()
s = socket.create_connection(("127.0.0.1", port))
s.settimeout(30)
t0 = time.perf_counter()
s.sendall(("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers
           + "Content-Length: %d\r\n\r\n" % len(body)).encode() + body)
data = b""
while True:  # the whole response: head and body may arrive in separate segments on a loaded machine
    chunk = s.recv(4096)
    data += chunk
    head, sep, body = data.partition(b"\r\n\r\n")
    length = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:")]
    if not chunk or (sep and length and len(body) >= length[0]):
        break
print(json.dumps({"status": int(data.split(b" ", 2)[1]), "latency_s": time.perf_counter() - t0,
                  "detail": data.split(b"\r\n\r\n", 1)[-1].decode()}))
"""


def test_moderator_2mb_of_non_string_items_is_refused_at_the_first(server):
    """`{"texts":[1,1,...]}` (2 MB, a million ints) from a moderator. On 620acb1: 422 after 8.6 s,
    /healthz frozen 7.6 s, +1 GB RSS (a million ints validated on the loop, one error object each). Now the
    off-loop parser stops at item 0. Speed-independent bounds (the suite passes on a loaded machine):
    the server's own CPU time for the whole attack (its /healthz answers included), and /healthz scaled by
    this machine's idle noise measured in the same run; on 620acb1 both were seconds. Idle-machine figures:
    422 in ~0.05 s, /healthz <= ~10 ms."""
    from verifier.auth.devkeys import mint_token
    from verifier.base.settings import Settings

    base, port, proc, env = server
    token = mint_token(Settings(home=Path(env["HERO_HOME"]), dev_mode=True), "moderator", "mallory")
    out = _run(base, port, proc, f"Authorization: Bearer {token}\r\n", INTS, 1_000_000)
    print(out)
    assert out["status"] == 422 and "texts.0" in out["detail"] and "texts.1" not in out["detail"], out
    assert out["rss_growth_mb"] < 50, out
    assert out["server_cpu_s"] < 1.5, out  # a million ints validated one by one cost ~8 s of CPU on 620acb1
    assert out["worst_healthz_s"] < 0.5 + 5 * out["idle_worst_s"], out
