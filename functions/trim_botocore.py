"""Keep only the botocore data the functions use, in a built package (functions/Makefile runs this).

botocore ships the model of every AWS service (about 450 folders, 28 MB) and one endpoints file for
all of them (1.2 MB of JSON). A cold start pays for both: the first client lists every service folder
to check that its own exists, and parses the whole endpoints file. The functions make clients of a
handful of services only (``BOTOCORE_SERVICES`` in the Makefile; tests/static/test_build_makefile.py
checks that every client the code makes is among them), so the package keeps those folders, the
shared files (partitions, retry and default-configuration data) and, in the endpoints file, every
partition's own data with only those services' entries. A client of any other service would fail
with ``UnknownServiceError`` at once, never at a surprise later.

Usage: python3.13 trim_botocore.py PACKAGE_DIR SERVICE...
Not shipped: the Makefile copies packages (folders with an ``__init__.py``), never this file.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path


def endpoint_prefix(service_dir: Path) -> str:
    """The endpoints file's key of the service in ``service_dir``: its newest model's endpointPrefix."""
    newest = sorted(path for path in service_dir.iterdir() if path.is_dir())[-1]
    plain, packed = newest / "service-2.json", newest / "service-2.json.gz"
    text = plain.read_bytes() if plain.is_file() else gzip.decompress(packed.read_bytes())
    prefix = json.loads(text)["metadata"]["endpointPrefix"]
    if not isinstance(prefix, str):
        raise SystemExit(f"error: {newest} names no endpointPrefix")
    return prefix


def trim(package: Path, services: list[str]) -> None:
    data = package / "botocore" / "data"
    if not data.is_dir():
        print(f"trim_botocore: no botocore in {package}, nothing to trim")
        return
    missing = sorted(name for name in services if not (data / name).is_dir())
    if missing:
        raise SystemExit(f"error: botocore has no service {', '.join(missing)} (BOTOCORE_SERVICES)")
    prefixes = {endpoint_prefix(data / name) for name in services}
    for entry in data.iterdir():
        if entry.is_dir() and entry.name not in services:
            shutil.rmtree(entry)
    endpoints_file = data / "endpoints.json"
    endpoints = json.loads(endpoints_file.read_text(encoding="utf-8"))
    for partition in endpoints["partitions"]:
        partition["services"] = {
            name: entry for name, entry in partition["services"].items() if name in prefixes
        }
    endpoints_file.write_text(json.dumps(endpoints, separators=(",", ":")), encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    trim(Path(sys.argv[1]), sys.argv[2:])
