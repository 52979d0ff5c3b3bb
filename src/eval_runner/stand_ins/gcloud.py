#!/usr/bin/env python3
"""A stand-in for `gcloud storage cp` (Google Cloud Storage is outside our control): it copies the file into
a local directory laid out as the embedded Blossom server keeps blobs (`<dir>/<ab>/<hex>` and a `<hex>.type`
symlink), so that server can stand in for the bucket's public read base. Standard library only.

`$CLOUDSDK_CONFIG/stand-in-bucket` holds that directory's path. `$CLOUDSDK_CONFIG/stand-in-refuse`, if it
exists, makes every copy fail with its text on stderr, as a refusing bucket would.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    config = Path(os.environ.get("CLOUDSDK_CONFIG", ""))
    refuse = config / "stand-in-refuse"
    if refuse.exists():
        sys.stderr.write("ERROR: (gcloud.storage.cp) stand-in bucket\n" + refuse.read_text())
        return 1
    words = [word for word in argv if word != "--quiet"]
    types = [word.removeprefix("--content-type=") for word in words if word.startswith("--content-type=")]
    words = [word for word in words if not word.startswith("--")]
    if words[:2] != ["storage", "cp"] or len(words) != 4 or len(types) != 1:
        sys.stderr.write(f"ERROR: the stand-in gcloud does not take {argv!r}\n")
        return 2
    source, target = Path(words[2]), words[3]
    name = target.rsplit("/", 1)[-1]
    root = Path((config / "stand-in-bucket").read_text().strip())
    folder = root / name[:2]
    folder.mkdir(parents=True, exist_ok=True)
    temp = folder / f".{name}.stand-in.tmp"
    shutil.copyfile(source, temp)
    os.replace(temp, folder / name)
    type_link = folder / f"{name}.type"
    if not type_link.is_symlink():
        os.symlink(types[0], type_link)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
