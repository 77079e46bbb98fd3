"""`hero bench serve`: end-to-end /v1/verify throughput of a real server, as one JSON line.

It starts `hero serve` on 127.0.0.1 (a free port) with a fresh temporary home (dev-mode tokens, new keys,
no quotas), drives it for `--seconds` with `--concurrency` keep-alive connections, each request carrying
`--texts-per-request` BBC news texts of ~220 tokens, then stops it and deletes the home. Load generator:
`wrk` when installed (scripts/install_wrk), else the asyncio client below; its own CPU share is reported
(`generator_cpu_share`: CPU seconds / (wall seconds x cores)), and so is the server's, so a figure taken on a
loaded or too small machine shows it. `tokenizer_tokens_per_s` is the same texts tokenized alone (batched,
in this process, with no server running): the bound a CPU verifier cannot beat. It is the mean of a timing
before the server starts and one after it stopped (`tokenizer_tokens_per_s_before_after`): on a machine whose
speed drifts between runs, one timing taken a minute earlier moved the ratio by a third.

Keys: texts_per_s, tokens_per_s, p50_ms, p99_ms, errors, tokenizer_tokens_per_s, plus the settings,
ratio_to_tokenizer, generator, generator_cpu_share, server_cpu_share and the load average before/after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from verifier.cli.bench_figures import bench_texts, free_port, pg_schema
from verifier.cli.common import emit

DISTINCT_BODIES = 16
ROLES_YAML = """\
roles:
  moderator: {max_level: 1, actions: [verify]}
  auditor: {max_level: all, actions: [verify, audit.read]}
  admin: {max_level: all, actions: [verify, keys.read, keys.write, audit.read, jobs.read_all, metrics.read]}
"""


def register(bsub: argparse._SubParsersAction) -> None:
    s = bsub.add_parser("serve", help="end-to-end /v1/verify throughput of a server started on loopback")
    s.add_argument("--concurrency", type=int, default=32, help="concurrent keep-alive connections")
    s.add_argument("--texts-per-request", type=int, default=1, help="texts per request")
    s.add_argument("--seconds", type=float, default=5.0, help="measured seconds (at most 120)")
    s.add_argument("--role", choices=["moderator", "auditor"], default="moderator",
                   help="moderator: level 1 only; auditor: every level")
    s.add_argument("--database-url", default=None,
                   help="default: SQLite in the temporary home; a PostgreSQL URL gets a private schema, dropped after")
    s.add_argument("--profile", default=None, help="watermark profile of the server (default: HERO_PROFILE or default)")
    s.add_argument("--generator", choices=["auto", "wrk", "python"], default="auto",
                   help="the load generator: wrk, or the Python one; auto: wrk when installed")
    s.add_argument("--workers", type=int, default=None, help="server worker processes (default: hero serve's)")
    s.add_argument("--server-env", action="append", default=[], metavar="NAME=VALUE",
                   help="extra HERO_* setting for the server, e.g. HERO_VERIFY_BATCHING=0 (repeatable)")
    s.add_argument("--server-source", default=None, metavar="DIR",
                   help="run the server from another checkout of this project (before/after comparisons)")
    s.set_defaults(handler=cmd_serve_bench)


# -- texts -------------------------------------------------------------------------------------------
def tokenizer_rate(tokenizer, texts: list[str], batch: int, min_s: float = 1.0) -> tuple[float, float]:
    """(tokens/s of batched tokenization of `texts`, mean tokens per text), timed for at least `min_s`, through
    the same call the verifier tokenizes with (verifier.lm.encode_ids: the Rust backend's batch call)."""
    from verifier.lm import encode_ids

    batch = max(1, batch)
    chunks = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    n_tok = sum(len(x) for c in chunks for x in encode_ids(tokenizer, c))
    done, t0 = 0, time.perf_counter()
    while True:
        for c in chunks:
            encode_ids(tokenizer, c)
        done += n_tok
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return done / dt, n_tok / len(texts)


# -- server ------------------------------------------------------------------------------------------
def _hero(env: dict, *args: str, cwd: str | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "verifier.cli", *args], env=env, capture_output=True, text=True,
                         timeout=300, cwd=cwd)
    if out.returncode != 0:
        raise RuntimeError(f"hero {args[0]} failed: {(out.stderr.strip().splitlines() or ['?'])[-1]}")
    return out.stdout


def _cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` and its direct children (uvicorn workers), from /proc (0 where unavailable)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    try:
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    stat = Path(f"/proc/{d}/stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    pids.append(int(d))
        for p in pids:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    except (OSError, ValueError, IndexError):
        return 0.0
    return total


def _wait_ready(port: int, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited (status {proc.returncode}) before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not become ready in time")


def _drained(port: int, token: str, body: bytes, timeout: float = 300.0) -> None:
    """Returns once one request sent now is answered: everything queued before it has been served."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/verify", data=body, method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (fixed http://127.0.0.1 URL)
        r.read()


# -- load generators ---------------------------------------------------------------------------------
def _http_request(port: int, token: str, body: bytes) -> bytes:
    return (
        f"POST /v1/verify HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _python_load(port: int, token: str, bodies: list[bytes], conns: int, seconds: float) -> dict:
    """Keep-alive HTTP/1.1 clients on raw asyncio streams (httpx costs several times more CPU per request)."""
    reqs = [_http_request(port, token, b) for b in bodies]
    lat: list[float] = []
    stats = {"ok": 0, "errors": 0}
    stop_at = time.perf_counter() + seconds

    async def one(k: int) -> None:
        i = k
        reader = writer = None
        while time.perf_counter() < stop_at:
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                t0 = time.perf_counter()
                writer.write(reqs[i % len(reqs)])
                i += 1
                status = int((await reader.readline()).split()[1])
                length = 0
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                lat.append(time.perf_counter() - t0)
                stats["ok" if status == 200 else "errors"] += 1
            except (OSError, ValueError, IndexError, asyncio.IncompleteReadError):
                stats["errors"] += 1
                if writer is not None:
                    writer.close()
                reader = writer = None
        if writer is not None:
            writer.close()

    cpu0, t0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(conns)))
    wall = time.perf_counter() - t0
    lat.sort()

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000 if lat else float("nan")

    return {"ok": stats["ok"], "errors": stats["errors"], "wall_s": wall, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "generator_cpu_s": time.process_time() - cpu0}


WRK_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,'
    .. '"status":%d,"timeout":%d,"p50_us":%.1f,"p99_us":%.1f}\\n', summary.requests, summary.duration,
    e.connect, e.read, e.write, e.status, e.timeout, latency:percentile(50), latency:percentile(99)))
end
"""


def _wrk_load(wrk: str, port: int, token: str, bodies: list[bytes], conns: int, seconds: float, home: Path) -> dict:
    script = home / "bench.lua"
    items = ",\n".join(f"[==[{b.decode()}]==]" for b in bodies)
    script.write_text(
        f"local bodies = {{\n{items}\n}}\nlocal i = 0\n"
        f'local headers = {{["Content-Type"] = "application/json", ["Authorization"] = "Bearer {token}"}}\n'
        'request = function()\n  i = i + 1\n'
        '  return wrk.format("POST", "/v1/verify", headers, bodies[(i % #bodies) + 1])\nend\n' + WRK_DONE
    )
    threads = max(1, min(conns, os.cpu_count() or 1, 4))
    before = os.times()
    t0 = time.perf_counter()
    out = subprocess.run(
        [wrk, "-t", str(threads), "-c", str(conns), "-d", f"{max(1, round(seconds))}s", "--timeout", "10s",
         "-s", str(script), f"http://127.0.0.1:{port}/v1/verify"],
        capture_output=True, text=True, timeout=seconds + 60,
    )
    wall = time.perf_counter() - t0
    after = os.times()
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if out.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed: {(out.stderr.strip().splitlines() or ['no output'])[-1]}")
    r = json.loads(line[len("WRKJSON "):])
    sock_errors = r["connect"] + r["read"] + r["write"] + r["timeout"]
    return {"ok": r["requests"] - r["status"], "errors": r["status"] + sock_errors,
            "wall_s": r["duration_us"] / 1e6 or wall, "p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000,
            "generator_cpu_s": (after.children_user - before.children_user)
            + (after.children_system - before.children_system)}


# -- the command -------------------------------------------------------------------------------------
def cmd_serve_bench(args: argparse.Namespace) -> None:
    if not 1 <= args.concurrency <= 4096 or not 1 <= args.texts_per_request <= 4096:
        raise ValueError("--concurrency and --texts-per-request must be in 1..4096")
    if not 0 < args.seconds <= 120:
        raise ValueError("--seconds must be in (0, 120]")
    wrk = shutil.which("wrk") if args.generator in ("auto", "wrk") else None
    if args.generator == "wrk" and wrk is None:
        raise RuntimeError("wrk is not installed (scripts/install_wrk); use --generator python")
    home = Path(tempfile.mkdtemp(prefix="hero-bench-"))
    try:
        if args.database_url and args.database_url.startswith("postgresql"):
            with pg_schema(args.database_url) as url:
                result = _run(args, home, url, wrk)
        else:
            result = _run(args, home, args.database_url, wrk)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    emit(result)


def _run(args: argparse.Namespace, home: Path, db_url: str | None, wrk: str | None) -> dict:
    from verifier.engine.profile import resolve_profile
    from verifier.lm import load_tokenizer

    (home / "roles.yaml").write_text(ROLES_YAML)  # no quotas: the bench measures the verifier, not the limiter
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERO_") or k == "HERO_MODEL_CACHE"}
    env.update({"HERO_HOME": str(home / "home"), "HERO_DEV_MODE": "1", "HERO_ROLES_FILE": str(home / "roles.yaml"),
                "HERO_LOG_LEVEL": "WARNING"})
    if args.profile:
        env["HERO_PROFILE"] = args.profile
    if db_url:
        env["HERO_DATABASE_URL"] = db_url
    # `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH: the server runs in the
    # source directory, or a bench started inside another checkout would serve that checkout's code.
    cwd = None
    if args.server_source:
        cwd = env["PYTHONPATH"] = str(Path(args.server_source).resolve())
    for item in args.server_env:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("HERO_"):
            raise ValueError(f"--server-env wants HERO_NAME=VALUE, got {item!r}")
        env[name] = value
    _hero(env, "db", "upgrade", cwd=cwd)
    _hero(env, "keys", "init", "--profile", args.profile or "default", cwd=cwd)
    token = _hero(env, "token", "--role", args.role, "--sub", "bench", "--ttl", "3600", cwd=cwd).strip()

    profile = resolve_profile(args.profile or "default")  # the profile the server was given keys for
    tokenizer = load_tokenizer(profile.tokenizer)
    m = args.texts_per_request
    texts = bench_texts(tokenizer, max(DISTINCT_BODIES, m * min(DISTINCT_BODIES, 4)))
    bodies = [json.dumps({"texts": [texts[(b * m + j) % len(texts)] for j in range(m)]}).encode()
              for b in range(DISTINCT_BODIES)]
    tok_before, tokens_per_text = tokenizer_rate(tokenizer, texts, max(m, 32))

    port = free_port()
    cmd = [sys.executable, "-m", "verifier.cli", "serve", "--host", "127.0.0.1", "--port", str(port)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, cwd=cwd)
    try:
        _wait_ready(port, proc)

        def load(seconds: float) -> dict:
            if wrk:
                return _wrk_load(wrk, port, token, bodies, args.concurrency, seconds, home)
            return asyncio.run(_python_load(port, token, bodies, args.concurrency, seconds))

        load(min(2.0, args.seconds))  # warm-up: caches, allocator, connection set-up
        _drained(port, token, bodies[0])  # the warm-up's abandoned requests must not count against the run
        load_before = os.getloadavg()[0]
        cpu0, t0 = _cpu_seconds(proc.pid), time.perf_counter()
        r = load(args.seconds)
        server_cpu = _cpu_seconds(proc.pid) - cpu0
        wall = time.perf_counter() - t0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    tok_after, _ = tokenizer_rate(tokenizer, texts, max(m, 32))  # the server is gone: the same idle conditions
    tok_rate = (tok_before + tok_after) / 2
    cores = os.cpu_count() or 1
    texts_per_s = r["ok"] * m / r["wall_s"]
    return {
        "bench": "serve",
        "texts_per_s": round(texts_per_s, 1),
        "tokens_per_s": round(texts_per_s * tokens_per_text, 1),
        "p50_ms": round(r["p50_ms"], 2) if r["ok"] else None,  # null: no request completed in the window
        "p99_ms": round(r["p99_ms"], 2) if r["ok"] else None,
        "errors": r["errors"],
        "tokenizer_tokens_per_s": round(tok_rate, 1),
        "tokenizer_tokens_per_s_before_after": [round(tok_before, 1), round(tok_after, 1)],
        "ratio_to_tokenizer": round(texts_per_s * tokens_per_text / tok_rate, 3),
        "concurrency": args.concurrency,
        "texts_per_request": m,
        "role": args.role,
        "profile": profile.name,
        "database": "postgresql" if db_url and db_url.startswith("postgresql") else "sqlite",
        "seconds": round(r["wall_s"], 2),
        "requests": r["ok"],
        "tokens_per_text": round(tokens_per_text, 1),
        "generator": "wrk" if wrk else "python",
        "generator_cpu_share": round(r["generator_cpu_s"] / (wall * cores), 3),
        "server_cpu_share": round(server_cpu / (wall * cores), 3),
        "server_source": args.server_source or "this checkout",
        "server_cpu_ms_per_text": round(1000 * server_cpu / max(1, r["ok"] * m), 3),
        "cores": cores,
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
