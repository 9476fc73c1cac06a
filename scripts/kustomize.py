"""Renders a kustomization directory to YAML on stdout: the subset of
Kustomize that deploy/kubernetes uses (`resources` as files or directories,
`images`, `replicas`, and `patches` as inline JSON patches with a kind/name
target), so that scripts/check-image.sh can check the manifests where
`kubectl kustomize` is not installed. Anything else in a kustomization is
refused rather than ignored.

Usage: python scripts/kustomize.py DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

KNOWN = {"apiVersion", "kind", "resources", "images", "replicas", "patches"}


def render(directory: Path) -> list[dict]:
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - KNOWN
    if unknown:
        raise SystemExit(f"{directory}: unsupported kustomization fields {sorted(unknown)}")
    objects: list[dict] = []
    for resource in spec.get("resources", []):
        path = (directory / resource).resolve()
        if path.is_dir():
            objects.extend(render(path))
        else:
            objects.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    for image in spec.get("images", []):
        for container in containers(objects):
            if container.get("image", "").split(":")[0] == image["name"]:
                name = image.get("newName", image["name"])
                tag = image.get("newTag")
                container["image"] = f"{name}:{tag}" if tag else name
    for replicas in spec.get("replicas", []):
        matched = [o for o in objects if o["metadata"]["name"] == replicas["name"] and "replicas" in o.get("spec", {})]
        if not matched:
            raise SystemExit(f"{directory}: replicas: nothing named {replicas['name']} has replicas")
        for obj in matched:
            obj["spec"]["replicas"] = replicas["count"]
    for patch in spec.get("patches", []):
        target = patch["target"]
        matched = [o for o in objects if o["kind"] == target["kind"] and o["metadata"]["name"] == target["name"]]
        if not matched:
            raise SystemExit(f"{directory}: patch target {target} matches nothing")
        for obj in matched:
            for op in yaml.safe_load(patch["patch"]):
                apply(obj, op)
    return objects


def containers(objects: list[dict]):
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        yield from pod.get("containers", [])
        yield from pod.get("initContainers", [])


def apply(obj: dict, op: dict) -> None:
    """One JSON patch operation (`add` or `replace`) on a path of keys."""
    if op["op"] not in ("add", "replace"):
        raise SystemExit(f"unsupported patch op {op['op']}")
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
    node = obj
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if op["op"] == "replace" and last not in node:
        raise SystemExit(f"replace: {op['path']} does not exist")
    node[last] = op["value"]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(yaml.safe_dump_all(render(Path(sys.argv[1])), sort_keys=False), end="")
