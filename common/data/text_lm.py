"""Offline text for training small causal LMs: documents, a seeded split by document, tokenisers.

Documents are the unit of the split (never a window across the train/val boundary by
construction: each side is its own token stream). Sources: `pydoc` (the interpreter's help topics,
one document per topic) and `fortunes` (Debian's fortune files, one document per entry). Windows
of a token stream come from common/data/text.py (`random_windows`, `consecutive_windows`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from common.data.download import DatasetNotFound
from common.data.text import FORTUNES_DIR

SOURCES = ("pydoc", "fortunes")


def _fortune_entries(text: str) -> list[str]:
    entries, cur = [], []
    for line in text.split("\n"):
        if line == "%":
            entries.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    entries.append("\n".join(cur))
    return [e.strip("\n") for e in entries if e.strip()]


def documents(source: str, root: Path | str | None = None) -> list[str]:
    """The documents of `source`: "pydoc" = `pydoc_data.topics` values by sorted key; "fortunes" =
    the entries of the Debian fortune files (files sorted, `.dat`/`.u8` skipped, an entry ends at a
    line that is exactly `%`, outer newlines stripped, blank entries dropped)."""
    if source == "pydoc":
        from pydoc_data.topics import topics
        return [topics[k] for k in sorted(topics)]
    if source == "fortunes":
        root = Path(root) if root is not None else FORTUNES_DIR
        files = sorted(p for p in root.glob("*") if p.is_file() and p.suffix not in (".dat", ".u8")) \
            if root.is_dir() else []
        if not files:
            raise DatasetNotFound(f"no fortune files in {root}. Install them with: apt-get install -y fortunes")
        return [e for p in files for e in _fortune_entries(p.read_text(encoding="utf-8", errors="replace"))]
    raise ValueError(f"unknown text source '{source}'; choose one of {', '.join(SOURCES)}")


def split_documents(docs: list, val_fraction: float = 0.1, seed: int = 0) -> tuple[list, list]:
    """(train, val): n_val = max(1, round(f·n)); val = docs at default_rng(seed).permutation(n)[:n_val];
    both keep the original order."""
    n = len(docs)
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if n < 2:
        raise ValueError(f"need at least 2 documents to split, got {n}")
    n_val = max(1, round(val_fraction * n))
    if n_val >= n:
        raise ValueError(f"val_fraction {val_fraction} of {n} documents leaves no training document")
    val_idx = set(np.random.default_rng(seed).permutation(n)[:n_val].tolist())
    train = [d for i, d in enumerate(docs) if i not in val_idx]
    val = [d for i, d in enumerate(docs) if i in val_idx]
    return train, val


class CharTokenizer:
    """Characters of the training texts, sorted, are ids 1..V; 0 is any unseen character (decoded
    as U+FFFD)."""
    UNKNOWN = "\ufffd"

    def __init__(self, chars: list[str]):
        if not chars:
            raise ValueError("CharTokenizer needs at least one character")
        self.chars = list(chars)
        self.stoi = {c: i + 1 for i, c in enumerate(self.chars)}

    @classmethod
    def from_texts(cls, texts) -> "CharTokenizer":
        return cls(sorted(set("".join(texts))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(c, 0) for c in text]

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else ids
        return "".join(self.chars[i - 1] if 0 < i <= len(self.chars) else self.UNKNOWN for i in ids)


class BPETokenizer:
    """Byte-level BPE trained by `tokenizers` (GPT-2's scheme: 256-byte initial alphabet, so any
    text encodes and decodes losslessly)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    @classmethod
    def train(cls, texts, vocab_size: int, min_frequency: int = 2) -> "BPETokenizer":
        try:
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        except ImportError as err:
            from common.config import UserError
            raise UserError(f"BPETokenizer needs the llm extra: pip install -e '.[llm]' ({err})") from err
        if vocab_size < 256:
            raise ValueError(f"a byte-level BPE vocabulary holds the 256 bytes; vocab_size {vocab_size} < 256")
        if min_frequency < 1:
            raise ValueError(f"min_frequency must be >= 1, got {min_frequency}")
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[])
        tok.train_from_iterator(list(texts), trainer=trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
        return self.tokenizer.decode(ids)


def token_stream(docs, tokenizer, sep: str = "\n\n") -> torch.Tensor:
    """The documents joined by `sep`, encoded into one 1-D LongTensor."""
    docs = list(docs)
    if not docs:
        raise ValueError("token_stream needs at least one document")
    return torch.tensor(tokenizer.encode(sep.join(docs)), dtype=torch.long)
