#!/usr/bin/env python3
"""Render a Kustomize directory of deploy/kubernetes without kubectl: the subset these manifests use.

    python scripts/render_kustomize.py deploy/kubernetes/overlays/gpu > gpu.yaml

Supported (anything else in a kustomization.yaml is an error, so the manifests cannot outgrow what CI checks):
`resources` (files, or directories with their own kustomization.yaml, rendered first), `namespace` (set on
every namespaced object), `labels` (pairs added to each object's metadata.labels; selectors untouched),
`images` (name -> newName:newTag in pod templates) and `patches` with an inline JSON 6902 `patch` and a
`target` of kind + name. `kubectl kustomize` renders the same directories to the same objects.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jsonpatch
import yaml

KNOWN = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "patches"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PriorityClass"}


def render(directory: str | Path) -> list[dict]:
    d = Path(directory)
    k = yaml.safe_load((d / "kustomization.yaml").read_text())
    unknown = set(k) - KNOWN
    if unknown:
        raise ValueError(f"{d}/kustomization.yaml: unsupported fields {sorted(unknown)}")
    objs: list[dict] = []
    for res in k.get("resources", []):
        path = d / res
        if path.is_dir():
            objs += render(path)
        else:
            objs += [o for o in yaml.safe_load_all(path.read_text()) if o]
    for p in k.get("patches", []):
        if set(p) != {"target", "patch"} or set(p["target"]) != {"kind", "name"}:
            raise ValueError(f"{d}: only inline JSON 6902 patches with a kind + name target are supported")
        ops = yaml.safe_load(p["patch"])
        hits = [i for i, o in enumerate(objs)
                if o["kind"] == p["target"]["kind"] and o["metadata"]["name"] == p["target"]["name"]]
        if len(hits) != 1:
            raise ValueError(f"{d}: patch target {p['target']} matches {len(hits)} objects")
        objs[hits[0]] = jsonpatch.apply_patch(objs[hits[0]], ops)
    for o in objs:
        meta = o.setdefault("metadata", {})
        if "namespace" in k and o["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = k["namespace"]
        for group in k.get("labels", []):
            meta.setdefault("labels", {}).update(group["pairs"])
        for img in k.get("images", []):
            spec = o.get("spec", {}).get("template", {}).get("spec") or o.get("spec", {}).get("jobTemplate", {})
            for c in (spec or {}).get("containers", []) + (spec or {}).get("initContainers", []):
                name = c["image"].split("@")[0].rsplit(":", 1)[0] if ":" in c["image"].split("/")[-1] else c["image"]
                if name == img["name"] or name == img.get("newName"):
                    c["image"] = f"{img.get('newName', img['name'])}:{img['newTag']}"
    return objs


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(render(sys.argv[1]), sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
