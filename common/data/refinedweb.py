"""RefinedWeb (tiiuae/falcon-refinedweb): pinned parquet shards, their `content` column streamed as
documents, and tokenised windows streamed from them (the pre-training corpus of ReLU Strikes Back's
paper tier, issue #47).

The public extract is 5,534 parquet shards of ~300 MB (`data/train-XXXXX-of-05534-<id>.parquet`,
columns content, url, timestamp, dump, segment, image_urls). RefinedWeb has no canonical split: the
validation windows come from shards given apart (`val_shards`), never from a training shard.

Pinning: the shard names below and REVISION (the dataset commit that added shard 22, so shards 0-22
exist at it) were read from the Hub's tree page. The Hub's LFS sha256 of these shards were NOT
found from this machine (issue #47, 2026-12-02), so none is shipped: every shard must come with its
sha256 (`sha256: {file name: digest}`, read from the file's page on the Hub, "Git LFS Details").
A shard without one is refused, whether on disk or to be downloaded; a digest that does not match
is refused too (common.data.download)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch

from common.data.download import DatasetNotFound, find_or_fetch

REPO = "tiiuae/falcon-refinedweb"
REVISION = "080b4105da7635137b71ff26ee498031755a4f3e"
SHARDS = tuple(f"train-{i:05d}-of-05534-{h}.parquet" for i, h in (
    (0, "b8fc5348cbe605a5"), (1, "9bca3ce859516338"), (2, "01680948bd81de83"), (3, "b7806bb8ca893c23"),
    (4, "cbe1137f523084a7"), (5, "e4a5eae6c1419c9b"), (10, "5373970b3705bfc5"), (11, "7d7970b7bb98922c"),
    (13, "a2a70ea6a8536f67"), (14, "2628ae1bc45a28c9"), (15, "0c056156dc81ffc2"), (19, "724cfbde611d86f5")))
FOLDER = "refinedweb"
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / FOLDER
COLUMN = "content"


def shard_url(revision: str = REVISION) -> str:
    """The download prefix of the shards at `revision` (a shard's URL is this + its file name)."""
    return f"https://huggingface.co/datasets/{REPO}/resolve/{revision}/data/"


def _how(names: list[str], revision: str) -> str:
    return (f"method.data.reader.download=true on a machine with internet (fetches {', '.join(names)} from "
            f"{shard_url(revision)}, ~300 MB each, into <root>/{FOLDER}), or put those files there; each needs "
            f"its sha256 (the Hub's 'Git LFS Details' of the file) in method.data.reader.sha256")


def locate(names: Iterable[str], sha256: dict[str, str] | None, root: Path | str, download: bool = False,
           revision: str = REVISION) -> list[Path]:
    """The paths of the shards `names` (file names), each checked against `sha256[name]`; a missing
    shard is downloaded into `root/refinedweb` when `download`. Every shard needs its digest."""
    names, sha256 = list(names), dict(sha256 or {})
    if not names:
        raise ValueError("no RefinedWeb shard named")
    missing = [n for n in names if not sha256.get(n)]
    if missing:
        raise ValueError(f"no sha256 for RefinedWeb shard(s) {missing}: the Hub's digests are not shipped here "
                         f"(not found from this machine); pass them as sha256: {{file name: digest}}")
    out = []
    for name in names:
        folder = find_or_fetch("refinedweb", [Path(root) / FOLDER, SHARED], {name: sha256[name]},
                               shard_url(revision), download, _how([name], revision))
        out.append(folder / name)
    return out


def iter_documents(paths: Iterable[Path | str], column: str = COLUMN, batch_rows: int = 1024) -> Iterator[str]:
    """The `column` strings of the parquet files in order, read `batch_rows` rows at a time (a shard is
    never held whole in memory). Empty and null documents are skipped."""
    try:
        import pyarrow.parquet as pq
    except ImportError as err:   # the llm extra
        raise DatasetNotFound(f"reading parquet shards needs pyarrow: pip install -e '.[llm]' ({err})") from err
    for path in paths:
        f = pq.ParquetFile(str(path))
        if column not in f.schema_arrow.names:
            raise DatasetNotFound(f"{path} has no '{column}' column (columns: {f.schema_arrow.names})")
        for batch in f.iter_batches(batch_size=batch_rows, columns=[column]):
            for doc in batch.column(0).to_pylist():
                if doc:
                    yield doc


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def token_windows(docs: Iterable[str], tokenizer, seq_len: int, sep: int | None = None) -> Iterator[torch.Tensor]:
    """Consecutive non-overlapping (seq_len,) int64 windows of the documents' tokens, each document
    followed by the id `sep` (None: nothing between documents), streamed: only the tokens of the
    current document and the unfinished window are held. A trailing partial window is dropped."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, got {seq_len}")
    buf: list[int] = []
    for doc in docs:
        buf.extend(_encode(tokenizer, doc))
        if sep is not None:
            buf.append(int(sep))
        while len(buf) >= seq_len:
            yield torch.tensor(buf[:seq_len], dtype=torch.long)
            buf = buf[seq_len:]


class RefinedWeb:
    """The paper tier's data reader (`method.data.reader`): `val_windows(tok, t, n)` from `val_shards`,
    `train_batches(tok, t, batch_size)` a pure function of the step streamed from `train_shards`
    (windows step*B .. step*B + B - 1 of the stream; consecutive steps continue the stream, any other
    step restarts it and skips), `tokenizer` for a model trained from scratch. Documents are joined by
    the tokenizer's EOS id (when it has one)."""

    def __init__(self, train_shards: list[str], val_shards: list[str], sha256: dict[str, str] | None = None,
                 root: str = "data", download: bool = False, revision: str = REVISION, tokenizer=None,
                 column: str = COLUMN, paths: dict[str, str] | None = None):
        train_shards, val_shards = list(train_shards), list(val_shards)
        if not train_shards or not val_shards:
            raise ValueError("RefinedWeb needs at least one training shard and one validation shard")
        both = set(train_shards) & set(val_shards)
        if both:
            raise ValueError(f"shard(s) {sorted(both)} are both training and validation shards")
        if paths is not None:   # explicit files (tests, a local copy outside the data root): still checked
            from common.data.download import sha256 as digest
            for name in train_shards + val_shards:
                want = (sha256 or {}).get(name)
                if not want:
                    raise ValueError(f"no sha256 for RefinedWeb shard {name}")
                if digest(paths[name]) != want:
                    raise DatasetNotFound(f"{paths[name]} does not match its sha256 {want}; refusing to use it")
            self.train_paths = [Path(paths[n]) for n in train_shards]
            self.val_paths = [Path(paths[n]) for n in val_shards]
        else:
            self.train_paths = locate(train_shards, sha256, root, download, revision)
            self.val_paths = locate(val_shards, sha256, root, download, revision)
        self.tokenizer, self.column = tokenizer, column

    def _windows(self, paths, tok, t) -> Iterator[torch.Tensor]:
        return token_windows(iter_documents(paths, self.column), tok, t, getattr(tok, "eos_token_id", None))

    def val_windows(self, tok, seq_len: int, n: int) -> torch.Tensor:
        """(n', seq_len) the first n windows of the validation shards (n' < n when they hold fewer)."""
        got = []
        for w in self._windows(self.val_paths, tok, seq_len):
            if len(got) == n:
                break
            got.append(w)
        if not got:
            raise DatasetNotFound(f"the validation shards {self.val_paths} hold no full window of {seq_len} tokens")
        return torch.stack(got)

    def train_batches(self, tok, seq_len: int, batch_size: int) -> Callable[[int], torch.Tensor]:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")

        state: dict = {"stream": None, "next": 0}   # per closure: two trainings each restart at step 0

        def batches(step: int) -> torch.Tensor:
            try:
                if state["stream"] is None or step != state["next"]:
                    state["stream"] = self._windows(self.train_paths, tok, seq_len)
                    for _ in range(step * batch_size):
                        next(state["stream"])
                out = torch.stack([next(state["stream"]) for _ in range(batch_size)])
            except StopIteration:
                raise DatasetNotFound(f"the training shards ran out at step {step} (batch {batch_size} x "
                                      f"{seq_len} tokens): add shards or lower trainer.max_steps") from None
            state["next"] = step + 1
            return out
        return batches
