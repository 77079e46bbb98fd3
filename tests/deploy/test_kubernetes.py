"""deploy/kubernetes, offline: every overlay renders (scripts/render_kustomize.py, no kubectl; and `kubectl
kustomize`, to the same objects, where kubectl is installed), every core object validates against the Kubernetes
schemas (kubernetes-validate, strict), the CRDs against their subset schemas, the contracts of the manifests hold
(one API process per pod, HPA, spread, the per-image migration Job and the pods waiting for it, the CUDA image's
own name, no Secret in an overlay, ConfigMaps for the policy and profiles), and checkov passes
(scripts/check-kubernetes; each skip says why)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest

from verifier.jobs.observe import PENDING

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "kubernetes"
CRDS = {"ServiceMonitor": "servicemonitor.json", "ScaledObject": "scaledobject.json",
        "PrometheusRule": "prometheusrule.json", "ExternalSecret": "externalsecret.json"}
OVERLAYS = ["cpu", "gpu", "own-profile"]
DIGEST = "sha256:" + "ab" * 32


def _renderer():
    spec = importlib.util.spec_from_file_location("render_kustomize", REPO / "scripts" / "render_kustomize.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def _render(overlay: str, root: Path = K8S) -> list[dict]:
    return _renderer().render(root / "overlays" / overlay)


def _kubectl(directory: Path) -> list[dict] | None:
    """`kubectl kustomize` of the directory, or None without kubectl (CI's renderer still runs)."""
    import yaml

    if shutil.which("kubectl") is None:
        return None
    r = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [o for o in yaml.safe_load_all(r.stdout) if o]


def _both(overlay: str, root: Path = K8S) -> list[list[dict]]:
    """The overlay rendered by the repo's renderer and, where installed, by kubectl: each is checked."""
    return [objs for objs in (_render(overlay, root), _kubectl(root / "overlays" / overlay)) if objs is not None]


def _pod(objs: list[dict], kind: str, name: str) -> dict:
    return _one(objs, kind, name)["spec"]["template"]["spec"]


def _one(objs: list[dict], kind: str, name: str) -> dict:
    [o] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return o


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("version", ["1.29.0", "1.33.0"])
def test_every_object_validates_against_the_schemas(overlay, version):
    import kubernetes_validate

    objs = _render(overlay) + _renderer().render(K8S / "external-secrets")
    assert len(objs) >= 20
    for o in objs:
        if o["kind"] in CRDS:
            schema = json.loads((K8S / "schemas" / CRDS[o["kind"]]).read_text())
            jsonschema.validate(o, schema)
        else:
            kubernetes_validate.validate(o, version, strict=True)
        if o["kind"] != "Namespace":
            assert o["metadata"]["namespace"] == "hero", o["metadata"]["name"]


@pytest.mark.parametrize("overlay", [*OVERLAYS, "../external-secrets"])
def test_the_renderer_and_kubectl_kustomize_agree(overlay):
    ours = _render(overlay)
    theirs = _kubectl(K8S / "overlays" / overlay)
    if theirs is None:
        pytest.skip("kubectl is not installed (CI's renderer alone is checked)")

    def key(o):
        return o["kind"], o["metadata"]["name"]

    assert {key(o): o for o in ours} == {key(o): o for o in theirs}


def test_the_manifests_keep_their_contracts():
    cpu, gpu = _render("cpu"), _render("gpu")
    api = _pod(cpu, "Deployment", "hero-api")
    [c] = api["containers"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz" and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    config = _one(cpu, "ConfigMap", "hero-config")["data"]
    assert "HERO_DEV_MODE" not in config  # production: secrets are never minted (hero kek init)
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts[config["HERO_KEK_DIR"]]["readOnly"] and Path(config["HERO_LOG_KEY_FILE"]).parent.as_posix() in mounts
    assert {p["metadata"]["name"] for p in cpu if p["kind"] == "PodDisruptionBudget"} == {"hero-api", "hero-worker"}
    deny = _one(cpu, "NetworkPolicy", "default-deny")["spec"]
    assert deny["podSelector"] == {} and set(deny["policyTypes"]) == {"Ingress", "Egress"}
    assert PENDING in _one(cpu, "ScaledObject", "hero-worker")["spec"]["triggers"][0]["metadata"]["query"]

    lease = float(config["HERO_JOB_LEASE_SECONDS"])
    for objs, device in ((cpu, "cpu"), (gpu, "cuda")):
        w = _pod(objs, "Deployment", "hero-worker")
        [wc] = w["containers"]
        assert {e["name"]: e["value"] for e in wc["env"]}["HERO_WORKER_DEVICE"] == device
        assert wc["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}  # its own health check
        assert w["terminationGracePeriodSeconds"] > lease  # a batch held when stopped is finished, not waited out
        gpus = wc["resources"]["limits"].get("nvidia.com/gpu")
        assert gpus == (1 if device == "cuda" else None)
    image = {n: _pod(gpu, "Deployment", n)["containers"][0]["image"] for n in ("hero-worker", "hero-api")}
    assert image["hero-worker"] == "registry.example.com/hero-verifier-cuda:0.1.0"
    assert image["hero-api"] == "registry.example.com/hero-verifier:0.1.0"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_one_api_process_per_pod_scaled_by_the_hpa_and_spread(overlay):
    for objs in _both(overlay):
        dep = _one(objs, "Deployment", "hero-api")
        [c] = dep["spec"]["template"]["spec"]["containers"]
        assert c["command"][:2] == ["hero", "serve"] and c["command"][c["command"].index("--workers") + 1] == "1"
        assert "replicas" not in dep["spec"]  # the HPA owns the count; an apply must not reset it
        hpa = _one(objs, "HorizontalPodAutoscaler", "hero-api")["spec"]
        assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "hero-api"}
        assert hpa["minReplicas"] >= 2 and hpa["maxReplicas"] > hpa["minReplicas"]
        spread = {t["topologyKey"]: t for t in dep["spec"]["template"]["spec"]["topologySpreadConstraints"]}
        host = spread["kubernetes.io/hostname"]
        assert host["whenUnsatisfiable"] == "DoNotSchedule" and host["maxSkew"] == 1
        assert host["labelSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
        assert "kubernetes.io/hostname" in {t["topologyKey"] for t in
                                            _pod(objs, "Deployment", "hero-worker")["topologySpreadConstraints"]}
        assert "replicas" not in _one(objs, "Deployment", "hero-worker")["spec"]  # KEDA owns it


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_migration_job_is_per_image_and_the_pods_wait_for_it(overlay):
    for objs in _both(overlay):
        [job] = [o for o in objs if o["kind"] == "Job"]
        [mc] = job["spec"]["template"]["spec"]["containers"]
        assert mc["command"][-2:] == ["db", "upgrade"]
        tag = mc["image"].split("@")[0].rsplit(":", 1)[1]
        assert job["metadata"]["name"] == f"hero-migrate--{tag}"
        assert job["metadata"]["annotations"]["argocd.argoproj.io/sync-wave"] == "-1"
        for name in ("hero-api", "hero-worker"):
            pod = _pod(objs, "Deployment", name)
            [init] = pod["initContainers"]
            assert init["command"][:3] == ["hero", "db", "wait"]
            assert init["image"] == pod["containers"][0]["image"]  # waits for its own image's migration head


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_image_names_the_release_it_ships_with(overlay):
    """The manifests deploy the package's own version (verifier.__version__): a release that bumps the package
    and forgets a tag would apply the previous image (and its previous migration head) unnoticed."""
    from verifier import __version__

    for objs in _both(overlay):
        pods = [o["spec"]["template"]["spec"] for o in objs if o["kind"] in ("Deployment", "Job")]
        images = {c["image"] for pod in pods for c in [*pod.get("initContainers", []), *pod["containers"]]}
        assert images and {i.split("@")[0].rsplit(":", 1)[1] for i in images} == {__version__}, images


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "kubernetes"
    shutil.copytree(K8S, root)
    return root


def _set_images(root: Path, overlay: str, images: list[dict]) -> None:
    import yaml

    path = root / "overlays" / overlay / "kustomization.yaml"
    k = yaml.safe_load(path.read_text())
    k["images"] = [*k.get("images", []), *images]
    path.write_text(yaml.safe_dump(k, sort_keys=False))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_new_image_tag_renames_the_migration_job(tmp_path, overlay):
    """Re-applying with a new image is a new Job (a Job's pod template is immutable): its name follows the tag,
    a digest pinned beside it included; the same image again keeps the name (the finished Job is left alone)."""
    before = {o["metadata"]["name"] for o in _render(overlay) if o["kind"] == "Job"}
    root = _copy(tmp_path)
    _set_images(root, overlay, [{"name": "registry.example.com/hero-verifier", "newTag": "0.2.0-rc.1",
                                 "digest": DIGEST}])
    for objs in _both(overlay, root):
        [job] = [o for o in objs if o["kind"] == "Job"]
        assert job["metadata"]["name"] == "hero-migrate--0.2.0-rc.1" and {job["metadata"]["name"]} != before
        assert job["spec"]["template"]["spec"]["containers"][0]["image"] == (
            f"registry.example.com/hero-verifier:0.2.0-rc.1@{DIGEST}")
        assert _pod(objs, "Deployment", "hero-api")["initContainers"][0]["image"].endswith(DIGEST)
    assert {o["metadata"]["name"] for o in _render(overlay) if o["kind"] == "Job"} == before


def test_a_digest_pin_keeps_the_cuda_worker_on_the_cuda_image(tmp_path):
    root = _copy(tmp_path)
    _set_images(root, "gpu", [{"name": "registry.example.com/hero-verifier", "newTag": "0.1.0", "digest": DIGEST}])
    for objs in _both("gpu", root):
        worker = _pod(objs, "Deployment", "hero-worker")
        assert worker["containers"][0]["image"] == "registry.example.com/hero-verifier-cuda:0.1.0"
        assert worker["initContainers"][0]["image"] == "registry.example.com/hero-verifier-cuda:0.1.0"
        assert _pod(objs, "Deployment", "hero-api")["containers"][0]["image"].endswith("@" + DIGEST)
    cuda_digest = "sha256:" + "cd" * 32
    _set_images(root, "gpu", [{"name": "registry.example.com/hero-verifier-cuda", "newTag": "0.1.0",
                               "digest": cuda_digest}])
    for objs in _both("gpu", root):
        assert _pod(objs, "Deployment", "hero-worker")["containers"][0]["image"].endswith("-cuda:0.1.0@" + cuda_digest)
        assert _pod(objs, "Deployment", "hero-api")["containers"][0]["image"].endswith("@" + DIGEST)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_is_declared_and_the_external_secrets_fill_the_ones_the_pods_read(overlay):
    """An apply never carries a Secret (so it can never empty one made by the recipe); the ExternalSecret option
    makes exactly the Secrets the pods mount or read."""
    objs = _render(overlay)
    assert not [o for o in objs if o["kind"] == "Secret"]
    read = set()
    for o in objs:
        pod = (o.get("spec", {}).get("template") or {}).get("spec")
        for c in (pod or {}).get("containers", []) + (pod or {}).get("initContainers", []):
            read |= {e["secretRef"]["name"] for e in c.get("envFrom", []) if "secretRef" in e}
        read |= {v["secret"]["secretName"] for v in (pod or {}).get("volumes", []) if "secret" in v}
    assert read == {"hero-kek", "hero-log-key", "hero-jwks", "hero-urls"}
    external = _renderer().render(K8S / "external-secrets")
    assert {e["spec"]["target"]["name"] for e in external if e["kind"] == "ExternalSecret"} == read
    assert all(e["metadata"]["namespace"] == "hero" for e in external)


def test_policy_and_profiles_come_from_configmaps_the_pods_mount():
    import yaml

    objs = _render("cpu")
    config = _one(objs, "ConfigMap", "hero-config")["data"]
    policy = _one(objs, "ConfigMap", "hero-policy")["data"]
    assert yaml.safe_load(policy["roles.yaml"]) == yaml.safe_load((REPO / "policies" / "roles.yaml").read_text())
    assert _one(objs, "ConfigMap", "hero-profiles")["data"] == {}  # the shipped profiles, until an overlay adds
    for name in ("hero-api", "hero-worker"):
        pod = _pod(objs, "Deployment", name)
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
        roles_dir = mounts[str(Path(config["HERO_ROLES_FILE"]).parent)]
        assert volumes[roles_dir["name"]]["configMap"]["name"] == "hero-policy" and roles_dir["readOnly"]
        profiles = mounts[config["HERO_PROFILES_DIR"]]
        assert volumes[profiles["name"]]["configMap"]["name"] == "hero-profiles" and profiles["readOnly"]


def test_the_api_is_scraped_without_a_token():
    """The API's :9100 (HERO_METRICS_PORT: the public view, plus the queue and log gauges) is in its Service,
    admitted from the monitoring namespace, and scraped by a ServiceMonitor; :8000's /metrics keeps its token."""
    objs = _render("cpu")
    config = _one(objs, "ConfigMap", "hero-config")["data"]
    assert config["HERO_METRICS_EXPOSURE"] == "auth" and config["HERO_METRICS_HOST"] == "0.0.0.0"
    port = int(config["HERO_METRICS_PORT"])
    [c] = _pod(objs, "Deployment", "hero-api")["containers"]
    assert {"name": "metrics", "containerPort": port} in c["ports"]
    svc = _one(objs, "Service", "hero-api")["spec"]["ports"]
    assert {"name": "metrics", "port": port, "targetPort": "metrics"} in svc
    for name in ("hero-api", "hero-worker"):
        assert _one(objs, "ServiceMonitor", name)["spec"]["endpoints"][0]["port"] == "metrics"
    ingress = _one(objs, "NetworkPolicy", "hero-metrics-ingress")["spec"]
    assert set(ingress["podSelector"]["matchExpressions"][0]["values"]) == {"hero-api", "hero-worker"}
    [rule] = ingress["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert {p["port"] for p in rule["ports"]} == {port}
    scaled = _one(objs, "ScaledObject", "hero-worker")["spec"]
    assert scaled["minReplicaCount"] == 0  # the API serves the gauge: workers may scale to zero


def test_the_image_carries_the_kms_and_otel_extras():
    import re

    [extras] = re.findall(r'pip install "\$\{whl\}\[([a-z,]+)\]"', (REPO / "Dockerfile").read_text())
    assert {"kms", "otel", "postgres", "workers", "models"} <= set(extras.split(","))


@pytest.mark.slow  # first run installs checkov in its own venv (.venv-checkov)
def test_checkov_passes_with_every_skip_explained():
    if shutil.which("python3") is None:
        pytest.skip("python3 is not on PATH")
    for o in _render("gpu") + _render("own-profile"):
        for key, value in o["metadata"].get("annotations", {}).items():
            if key.startswith("checkov.io/skip"):
                check, _, why = value.partition("=")
                assert check.startswith("CKV") and len(why) > 30, (o["metadata"]["name"], value)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    r = subprocess.run([str(REPO / "scripts" / "check-kubernetes")], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert "Failed checks: 0" in r.stdout
