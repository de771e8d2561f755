"""Results JSON with provenance: config, git sha, package versions, host, time."""
from __future__ import annotations

import json
import platform
import socket
import subprocess
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PACKAGES = ("torch", "torchvision", "numpy", "scipy", "timm", "hydra-core", "scikit-learn")


def git_sha() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha or "unknown") + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def provenance() -> dict:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return {"git_sha": git_sha(), "versions": versions, "python": platform.python_version(),
            "host": socket.gethostname(), "platform": platform.platform(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def write(path: str | Path, payload: dict, config: dict | None = None) -> dict:
    record = {**payload, "provenance": provenance()}
    if config is not None:
        record["config"] = config
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return record


def update_marked_region(path: str | Path, key: str, text: str) -> bool:
    """Replace what stands between `<!-- BEGIN key -->` and `<!-- END key -->` in a Markdown
    file (README tables stay what the last reproduction or benchmark measured)."""
    path = Path(path)
    if not path.exists():
        return False
    content = path.read_text()
    begin, end = f"<!-- BEGIN {key} -->", f"<!-- END {key} -->"
    if begin not in content or end not in content:
        return False
    head, rest = content.split(begin, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{begin}\n{text.strip()}\n{end}{tail}")
    return True


def update_readmes(key: str, text: str) -> list[Path]:
    """Update the region `key` in README.md and every methods/*/README.md that has it."""
    paths = [ROOT / "README.md", *sorted((ROOT / "methods").glob("*/README.md"))]
    return [p for p in paths if update_marked_region(p, key, text)]
