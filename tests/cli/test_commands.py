"""The CLI's commands: `hero --help` and argument errors import nothing heavy (timed by
benchmarks/bench_cli.py, not here), one table of commands, `hero decode` through a running service when
HERO_URL is set, the benchmark warning below 3 repetitions, and `hero eval --quick --out DIR` writing its
report."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from verifier.cli import COMMANDS, build_parser, main

HEAVY = ("torch", "fastapi", "sqlalchemy", "transformers", "starlette", "scipy", "numpy")
PROBE = """
import sys
from verifier.cli import main
try:
    main({argv!r})
except SystemExit as exc:
    code = exc.code
print("HEAVY=" + ",".join(m for m in {heavy!r} if m in sys.modules), "CODE=" + str(code))
"""


def _probe(argv: list[str]) -> tuple[str, str]:
    r = subprocess.run([sys.executable, "-c", PROBE.format(argv=argv, heavy=HEAVY)], capture_output=True, text=True,
                       timeout=60, cwd=Path(__file__).resolve().parents[2])
    last = r.stdout.strip().splitlines()[-1]
    return last, r.stdout + r.stderr


@pytest.mark.parametrize("argv", [["--help"], ["decode", "--levels"], ["generate"], ["keys", "rotate"], ["nope"],
                                  ["bench", "decode", "--reps", "x"]])
def test_help_and_argument_errors_import_nothing_heavy(argv):
    last, out = _probe(argv)
    assert last.startswith("HEAVY= "), out
    assert ("CODE=0" if argv == ["--help"] else "CODE=2") in last, out
    if argv == ["--help"]:
        assert all(name in out for name in COMMANDS)  # every command is listed without importing its module


def test_every_command_comes_from_its_table_row():
    sub = build_parser([], full=True)._subparsers._group_actions[0]
    assert set(sub.choices) == set(COMMANDS)
    for name, parser in sub.choices.items():  # real parsers (stubs have no -h and no handler)
        assert parser.add_help, name
    # Only the command being run is loaded; the others are listed.
    one = build_parser(["token"])._subparsers._group_actions[0].choices
    assert one["token"].get_default("handler") is not None and not one["eval"].add_help


class _FakeService(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict]] = []
    status = 200

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if type(self).status != 200:
            payload = {"detail": "bad or missing token"}
        else:
            payload = {"results": [{"watermarked": True, "p_value": 1e-9, "levels": [], "receipt": {"leaf_index": 7}}]}
        raw = json.dumps(payload).encode()
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_service():
    server = HTTPServer(("127.0.0.1", 0), _FakeService)
    _FakeService.seen, _FakeService.status = [], 200
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _FakeService
    server.shutdown()


def test_decode_goes_to_the_service_when_hero_url_is_set(fake_service, monkeypatch, capsys):
    url, handler = fake_service
    monkeypatch.setenv("HERO_URL", url + "/")
    monkeypatch.setenv("HERO_TOKEN", "tok123")
    assert main(["decode", "--levels", "1,2", "--text", "some text"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["watermarked"] is True and out["receipt"]["leaf_index"] == 7
    assert handler.seen == [{"path": "/v1/verify", "auth": "Bearer tok123",
                             "body": {"texts": ["some text"], "max_level": 2}}]

    handler.status = 401
    assert main(["decode", "--text", "some text"]) == 2
    assert "service answered 401: bad or missing token" in capsys.readouterr().err

    monkeypatch.setenv("HERO_TOKEN", "")
    assert main(["decode", "--text", "x"]) == 2
    assert "HERO_TOKEN is empty" in capsys.readouterr().err
    monkeypatch.setenv("HERO_TOKEN", "t")
    assert main(["decode", "--text", "x", "--alpha", "0.01"]) == 2
    assert "--alpha applies to a local decode" in capsys.readouterr().err
    monkeypatch.setenv("HERO_URL", "file:///etc/passwd")
    assert main(["decode", "--text", "x"]) == 2
    assert "must start with http" in capsys.readouterr().err
    monkeypatch.setenv("HERO_URL", "http://127.0.0.1:9")  # nothing listens there
    assert main(["decode", "--text", "x"]) == 2
    assert "cannot reach" in capsys.readouterr().err


def test_remote_decode_does_not_load_torch(fake_service):
    url, _ = fake_service
    code = ("import sys; from verifier.cli import main; rc = main(['decode', '--text', 'hi']); "
            f"print('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules), rc)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "HERO_URL": url, "HERO_TOKEN": "t"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "HEAVY= 0"


def test_benchmarks_warn_below_three_repetitions(capsys):
    from verifier.cli.bench import warn_few_reps

    msg = warn_few_reps(1)
    assert msg and "--reps 3" in msg and "warning" in capsys.readouterr().err
    assert warn_few_reps(3) is None and capsys.readouterr().err == ""


def test_eval_quick_with_out_writes_the_report(monkeypatch, tmp_path, capsys):
    import hero_eval.report as report
    import hero_eval.runner as runner
    import verifier.lm as lm

    written = []

    class FakeRunner:
        def __init__(self, cfg, model, tokenizer):
            self.cfg = cfg

        def run(self):
            return {"cfg": self.cfg.out}

    monkeypatch.setattr(runner, "Runner", FakeRunner)
    monkeypatch.setattr(runner, "quick_summary", lambda results: {"ok": True})
    monkeypatch.setattr(lm, "load_model", lambda name: (None, None))
    monkeypatch.setattr(report, "write_report", lambda results, out: written.append(out))
    out = tmp_path / "quick-report"
    assert main(["eval", "--quick", "--out", str(out)]) == 0
    assert written == [out]
    assert "report written to" in capsys.readouterr().err
    assert main(["eval", "--quick"]) == 0
    assert written == [out] and "add --out DIR" in capsys.readouterr().err


def test_serve_holds_the_twin_loopback_port():
    """Bound to 127.0.0.1:P, `hero serve` also holds [::1]:P, and refuses a port whose twin is taken."""
    import errno
    import socket

    import pytest

    from verifier.cli.loopback import LoopbackSquatted, reserve_loopback_twin

    probe = socket.socket(socket.AF_INET6)
    try:
        probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this host")
    port = probe.getsockname()[1]
    probe.close()
    held = reserve_loopback_twin("127.0.0.1", port)
    assert held is not None
    try:
        squatter = socket.socket(socket.AF_INET6)
        with pytest.raises(OSError) as err:
            squatter.bind(("::1", port))
        assert err.value.errno == errno.EADDRINUSE
        squatter.close()
    finally:
        held.close()
    squatter = socket.socket(socket.AF_INET6)
    squatter.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    squatter.bind(("::1", port))
    squatter.listen(1)
    try:
        with pytest.raises(LoopbackSquatted, match="another process"):
            reserve_loopback_twin("127.0.0.1", port)
    finally:
        squatter.close()
    assert reserve_loopback_twin("0.0.0.0", port) is None and reserve_loopback_twin("127.0.0.1", 0) is None
