"""Text corpora for language-model calibration and evaluation, and their token windows.

Offline: the stdlib's pydoc topics (~113k SmolLM2 tokens of Python documentation) and
Debian's `fortunes` (~2.5 MB of quotations and jokes), two disjoint sources. Online (paper
tier): C4 and WikiText-2 through `datasets`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from common.data.download import DatasetNotFound

FORTUNES_DIR = Path("/usr/share/games/fortunes")


def pydoc_topics() -> str:
    """The interpreter's help topics (`pydoc_data.topics`), in a fixed order."""
    from pydoc_data.topics import topics
    return "\n\n".join(topics[k] for k in sorted(topics))


def fortunes(root: Path = FORTUNES_DIR) -> str:
    """All fortune files of the Debian package, entries separated by blank lines."""
    files = sorted(p for p in Path(root).glob("*") if p.is_file() and p.suffix not in (".dat", ".u8"))
    if not files:
        raise DatasetNotFound(f"no fortune files in {root}. Install them with: apt-get install -y fortunes")
    parts = [p.read_text(encoding="utf-8", errors="replace").replace("\n%\n", "\n\n") for p in files]
    return "\n\n".join(parts)


def hf_text(name: str, split: str) -> str:
    """WikiText-2 (raw) or the first C4 English validation shard, through `datasets` (online or cached)."""
    import datasets
    try:
        if name == "wikitext2":
            return "\n\n".join(datasets.load_dataset("wikitext", "wikitext-2-raw-v1", split=split)["text"])
        if name == "c4":
            ds = datasets.load_dataset("allenai/c4", data_files={"validation": "en/c4-validation.00000-of-00008.json.gz"},
                                       split="validation")
            return "\n\n".join(ds["text"][:20000])
    except (OSError, ConnectionError) as err:
        raise DatasetNotFound(f"could not load '{name}' through datasets ({err}); it downloads from the "
                              f"Hugging Face Hub on first use (run once online or point HF_HOME at a cache)") from err
    raise ValueError(f"unknown text source '{name}'; choose pydoc, fortunes, wikitext2 or c4")


def load_text(name: str, split: str = "test") -> str:
    if name == "pydoc":
        return pydoc_topics()
    if name == "fortunes":
        return fortunes()
    return hf_text(name, split)


def random_windows(ids: torch.Tensor, n: int, seq_len: int, seed: int) -> torch.Tensor:
    """`n` windows of `seq_len` tokens at seeded random offsets of a 1-D token tensor."""
    if len(ids) <= seq_len:
        raise ValueError(f"text has {len(ids)} tokens, fewer than one window of {seq_len}")
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(ids) - seq_len, (n,), generator=gen)
    return torch.stack([ids[s:s + seq_len] for s in starts.tolist()])


def consecutive_windows(ids: torch.Tensor, seq_len: int, max_tokens: int | None = None) -> torch.Tensor:
    """Non-overlapping windows from the start (the perplexity protocol of the pruning papers)."""
    ids = ids[:max_tokens] if max_tokens else ids
    n = len(ids) // seq_len
    if n == 0:
        raise ValueError(f"text has {len(ids)} tokens, fewer than one window of {seq_len}")
    return ids[: n * seq_len].view(n, seq_len)
