"""Turn a directory into a one-layer image tarball that `ctr images import` and `docker load` accept.

The e2e cluster has no registry to pull from, so the few images it needs besides the project's own
(the pod sandbox, CoreDNS) and the base the project's Dockerfile builds on are made here from a
directory. The tarball is in the layout `docker save` writes: `manifest.json`, the image config
named by its digest, and the layer as a plain tar.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
import time
from pathlib import Path

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# pseudo file systems are mounted by the runtime: their mount points stay, their contents never ship
_SKIP_BELOW = ("proc/", "sys/", "dev/")


def _layer(rootfs: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for directory, subdirs, files in os.walk(rootfs):
            subdirs.sort()
            for name in [*subdirs, *sorted(files)]:
                path = Path(directory, name)
                arcname = path.relative_to(rootfs).as_posix()
                if arcname.startswith(_SKIP_BELOW):
                    continue
                layer.add(path, arcname=arcname, recursive=False)
    return buffer.getvalue()


def write_image(*, rootfs: Path, tag: str, output: Path, entrypoint: list[str] | None,
                cmd: list[str] | None, env: list[str], user: str) -> str:
    """Write the image tarball; returns the layer's diff id."""
    layer = _layer(rootfs)
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "config": {"Env": env, "Entrypoint": entrypoint, "Cmd": cmd, "User": user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": f"e2e/cluster/rootfs_image.py from {rootfs.name}"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": ["layer.tar"]}]).encode()
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_suffix(output.suffix + ".partial")
    with tarfile.open(partial, "w") as image:
        for name, data in ((config_name, config_bytes), ("layer.tar", layer), ("manifest.json", manifest)):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            member.mtime = int(time.time())
            image.addfile(member, io.BytesIO(data))
    partial.replace(output)
    return diff_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rootfs", type=Path, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--entrypoint", nargs="*", default=None)
    parser.add_argument("--cmd", nargs="*", default=None)
    parser.add_argument("--env", action="append", default=[f"PATH={_DEFAULT_PATH}"])
    parser.add_argument("--user", default="")
    args = parser.parse_args()
    diff_id = write_image(rootfs=args.rootfs, tag=args.tag, output=args.output, entrypoint=args.entrypoint,
                          cmd=args.cmd, env=args.env, user=args.user)
    print(f"{args.output} {args.tag} {diff_id}")


if __name__ == "__main__":
    main()
