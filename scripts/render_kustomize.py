#!/usr/bin/env python3
"""Render a Kustomize directory of deploy/kubernetes without kubectl: the subset these manifests use.

    python scripts/render_kustomize.py deploy/kubernetes/overlays/gpu > gpu.yaml

Supported (anything else in a kustomization.yaml is an error, so the manifests cannot outgrow what CI checks):
`resources` (files, or directories with their own kustomization.yaml, rendered first), `configMapGenerator`
(`files`, `behavior` create / replace / merge, with `options.disableNameSuffixHash: true` only), `namespace`
(set on every namespaced object), `labels` (pairs added to each object's metadata.labels; selectors untouched),
`images` (name -> newName, newTag, digest in pod templates, as kustomize: `name:tag@digest`), `patches` with an
inline JSON 6902 `patch` and a `target` of kind + name, and `replacements` (a source field, a `delimiter` /
`index` part of it, into target fields; run last, as kustomize runs them). `kubectl kustomize` renders the same
directories to the same objects (tests/deploy compares them where kubectl is installed).
"""

from __future__ import annotations

import sys
from pathlib import Path

import jsonpatch
import yaml

KNOWN = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "patches", "replacements",
         "configMapGenerator"}
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
    for gen in k.get("configMapGenerator", []):
        _generate_configmap(d, gen, objs)
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
        spec = o.get("spec", {}).get("template", {}).get("spec") or o.get("spec", {}).get("jobTemplate", {})
        for c in (spec or {}).get("containers", []) + (spec or {}).get("initContainers", []):
            for img in k.get("images", []):
                c["image"] = _set_image(c["image"], img)
    for r in k.get("replacements", []):
        _replace(objs, r)
    return objs


def _split_image(ref: str) -> tuple[str, str | None, str | None]:
    """(name, tag, digest) of an image reference; a registry's port is not a tag."""
    ref, _, digest = ref.partition("@")
    name, tag = ref, None
    if ":" in ref.rsplit("/", 1)[-1]:
        name, tag = ref.rsplit(":", 1)
    return name, tag, digest or None


def _set_image(ref: str, img: dict) -> str:
    name, tag, digest = _split_image(ref)
    if name != img["name"]:
        return ref
    name = img.get("newName", name)
    if img.get("newTag") or img.get("digest"):  # kustomize: a new tag or digest replaces both old ones
        tag, digest = img.get("newTag"), img.get("digest")
    return name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def _generate_configmap(d: Path, gen: dict, objs: list[dict]) -> None:
    if set(gen) - {"name", "behavior", "files", "options"} or gen.get("options") != {"disableNameSuffixHash": True}:
        raise ValueError(f"{d}: configMapGenerator supports name, behavior, files and options.disableNameSuffixHash "
                         "true only")
    data = {}
    for f in gen.get("files", []):
        key, _, path = f.rpartition("=") if "=" in f else (Path(f).name, "", f)
        full = (d / path).resolve()
        if not full.is_relative_to(d.resolve()):  # kustomize's load restriction: files in or below the directory
            raise ValueError(f"{d}: {f} is not in or below the kustomization")
        data[key] = full.read_text()
    behavior = gen.get("behavior", "create")
    hits = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == gen["name"]]
    if behavior == "create":
        if hits:
            raise ValueError(f"{d}: ConfigMap {gen['name']} exists (behavior: replace or merge)")
        objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    elif len(hits) != 1:
        raise ValueError(f"{d}: configMapGenerator {gen['name']} ({behavior}) matches {len(hits)} ConfigMaps")
    else:
        hits[0]["data"] = data if behavior == "replace" else {**(hits[0].get("data") or {}), **data}


def _path(field: str) -> list[str]:
    """A kustomize fieldPath: dot-separated, `\\.` a literal dot, `[name=x]` the list item whose name is x."""
    return [part.replace("\x00", ".") for part in field.replace("\\.", "\x00").split(".")]


def _walk(obj: object, parts: list[str], create: bool = False) -> tuple[object, str]:
    for part in parts[:-1]:
        if part.startswith("[") and part.endswith("]"):
            key, _, value = part[1:-1].partition("=")
            [obj] = [item for item in obj if item.get(key) == value]  # type: ignore[union-attr]
        else:
            if part not in obj and create:  # type: ignore[operator]
                obj[part] = {}  # type: ignore[index]
            obj = obj[part]  # type: ignore[index]
    return obj, parts[-1]


def _selected(o: dict, select: dict) -> bool:
    return all(o["kind"] == v if key == "kind" else o["metadata"]["name"] == v for key, v in select.items())


def _replace(objs: list[dict], r: dict) -> None:
    src = r["source"]
    [o] = [o for o in objs if _selected(o, {k: src[k] for k in ("kind", "name") if k in src})]
    holder, last = _walk(o, _path(src["fieldPath"]))
    value = holder[last]  # type: ignore[index]
    opts = src.get("options", {})
    if "delimiter" in opts:
        parts = value.split(opts["delimiter"])
        if not 0 <= opts.get("index", 0) < len(parts):
            raise ValueError(f"options.index {opts.get('index', 0)} is out of bounds for value {value}")
        value = parts[opts.get("index", 0)]
    for t in r["targets"]:
        for obj in (o for o in objs if _selected(o, t["select"])):
            for field in t["fieldPaths"]:
                topts = t.get("options", {})
                holder, last = _walk(obj, _path(field), create=True)
                new = value
                if "delimiter" in topts:
                    parts, i = holder.get(last, "").split(topts["delimiter"]), topts.get("index", 0)
                    if i >= len(parts):
                        parts.append(value)
                    elif i < 0:
                        parts.insert(0, value)
                    else:
                        parts[i] = value
                    new = topts["delimiter"].join(parts)
                holder[last] = new  # type: ignore[index]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    sys.stdout.write(yaml.safe_dump_all(render(sys.argv[1]), sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
