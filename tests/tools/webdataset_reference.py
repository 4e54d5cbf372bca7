#!/usr/bin/python3
"""The samples of WebDataset tar shards, read by Python's tarfile, as the reference for kiln.

Usage: webdataset_reference.py OUT.json SHARD...

Grouping is WebDataset's documented rule: a member's key is its path up to the first dot of
its basename, its extension the rest (matched lower-cased); consecutive members with the same
key form one sample. Members that are not sample members are passed over without ending the
sample around them: members that are not regular files (directories, links; tarfile itself
consumes pax and GNU long-name headers), macOS metadata (a basename starting with "._", a path
under a "__MACOSX/" folder) and names without a key or an extension (".DS_Store", "README").

A sample is packable when exactly one member has an image extension and one has the extension
"cls" holding a decimal integer. Writes {"samples": [{"key", "images", "label"}...],
"members": N (every member tarfile yields), "used": N (image and cls members of samples)}.
No kiln code is involved.
"""
import json
import sys
import tarfile

IMAGE_EXTS = {"jpg", "jpeg", "png", "apng", "gif", "bmp", "tif", "tiff", "webp", "ppm", "pgm",
              "pbm", "pnm"}


def key_and_ext(name):
    """(key, lower-cased extension), or None for a name that is not a sample member's."""
    base_at = name.rfind("/") + 1
    base = name[base_at:]
    if base.startswith("._") or name.startswith("__MACOSX/") or "/__MACOSX/" in name:
        return None
    dot = base.find(".")
    if dot <= 0:
        return None
    return name[:base_at + dot], base[dot + 1:].lower()


def main():
    out, shards = sys.argv[1], sys.argv[2:]
    samples, members, used = [], 0, 0

    def flush(group):
        nonlocal used
        if group is None:
            return
        key, parts = group
        images = [data for ext, data in parts if ext in IMAGE_EXTS]
        labels = [data for ext, data in parts if ext == "cls"]
        used += len(images) + len(labels)
        label = None
        if len(labels) >= 1:
            try:
                label = int(labels[0].decode().strip())
            except ValueError:
                label = None
        samples.append({"key": key, "images": len(images), "label": label})

    for shard in shards:
        group = None
        with tarfile.open(shard, "r:*") as t:
            for m in t:
                members += 1
                if not m.isreg():
                    continue
                ke = key_and_ext(m.name)
                if ke is None:
                    continue
                key, ext = ke
                data = t.extractfile(m).read() if ext == "cls" else b""
                if group is None or group[0] != key:
                    flush(group)
                    group = (key, [])
                group[1].append((ext, data))
        flush(group)
    with open(out, "w") as f:
        json.dump({"samples": samples, "members": members, "used": used}, f)


if __name__ == "__main__":
    main()
