"""RefinedWeb reader (common/data/refinedweb.py, issue #47) on tiny synthetic parquet shards written here."""
import pytest
import torch

from common.data import refinedweb as rw
from common.data.download import DatasetNotFound, sha256

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


class CharTok:
    """A stand-in HF tokenizer: one id per character, EOS 0."""
    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        assert add_special_tokens is False
        return {"input_ids": [1 + ord(c) % 50 for c in text]}

    def __len__(self):
        return 51


DOCS_A = ["the cat sat", "", "on the mat today", None, "and slept"]
DOCS_B = ["a dog ran far away", "x", "ok then, goodbye"]
DOCS_V = ["validation text one", "validation text two is longer"]


def write(path, docs, extra=True):
    cols = {"content": pa.array(docs, type=pa.string())}
    if extra:
        cols["url"] = pa.array([f"u{i}" for i in range(len(docs))])
    pq.write_table(pa.table(cols), str(path), row_group_size=2)
    return path


@pytest.fixture
def shards(tmp_path):
    files = {"a.parquet": write(tmp_path / "a.parquet", DOCS_A), "b.parquet": write(tmp_path / "b.parquet", DOCS_B),
             "v.parquet": write(tmp_path / "v.parquet", DOCS_V)}
    return {k: str(v) for k, v in files.items()}, {k: sha256(v) for k, v in files.items()}


def reference_stream(docs, tok, t, sep=0):
    ids = []
    for d in docs:
        if d:
            ids += tok(d, add_special_tokens=False)["input_ids"] + [sep]
    n = len(ids) // t
    return torch.tensor(ids[: n * t]).reshape(n, t)


def test_iter_documents_streams_the_content_column_in_order(shards):
    paths, _ = shards
    got = list(rw.iter_documents([paths["a.parquet"], paths["b.parquet"]], batch_rows=2))
    assert got == [d for d in DOCS_A + DOCS_B if d]
    write_path = paths["a.parquet"].replace("a.parquet", "nocontent.parquet")
    pq.write_table(pa.table({"text": pa.array(["x"])}), write_path)
    with pytest.raises(DatasetNotFound, match="content"):
        list(rw.iter_documents([write_path]))


def test_token_windows_equal_the_joined_stream_cut_in_windows(shards):
    tok, docs = CharTok(), [d for d in DOCS_A + DOCS_B if d]
    for t in (1, 5, 7):
        got = torch.stack(list(rw.token_windows(docs, tok, t, sep=0)))
        assert torch.equal(got, reference_stream(docs, tok, t))
    with pytest.raises(ValueError, match="seq_len"):
        list(rw.token_windows(docs, tok, 0))


def test_reader_batches_are_a_pure_function_of_the_step(shards):
    paths, digests = shards
    reader = rw.RefinedWeb(["a.parquet", "b.parquet"], ["v.parquet"], sha256=digests, paths=paths, tokenizer=CharTok())
    tok, t, b = reader.tokenizer, 4, 3
    ref = reference_stream(DOCS_A + DOCS_B, tok, t)
    batches = reader.train_batches(tok, t, b)
    for step in (0, 1, 2, 1, 0, 3):                        # in order, then out of order (restart and skip)
        assert torch.equal(batches(step), ref[step * b: step * b + b])
    other = reader.train_batches(tok, t, b)                 # a second training restarts its own stream
    assert torch.equal(other(0), ref[:b]) and torch.equal(batches(4), ref[12:15])
    with pytest.raises(DatasetNotFound, match="ran out"):
        batches(len(ref) // b + 1)
    val = reader.val_windows(tok, t, 3)
    assert torch.equal(val, reference_stream(DOCS_V, tok, t)[:3])
    assert len(reader.val_windows(tok, t, 10_000)) == len(reference_stream(DOCS_V, tok, t))


def test_every_shard_needs_its_sha256_and_a_wrong_one_is_refused(shards, tmp_path):
    paths, digests = shards
    with pytest.raises(ValueError, match="sha256"):
        rw.RefinedWeb(["a.parquet"], ["v.parquet"], sha256={"a.parquet": digests["a.parquet"]}, paths=paths)
    with pytest.raises(DatasetNotFound, match="sha256"):
        rw.RefinedWeb(["a.parquet"], ["v.parquet"], sha256={**digests, "a.parquet": "0" * 64}, paths=paths)
    with pytest.raises(ValueError, match="both"):
        rw.RefinedWeb(["a.parquet"], ["a.parquet"], sha256=digests, paths=paths)
    with pytest.raises(ValueError, match="sha256"):           # the pinned names ship no digest
        rw.locate([rw.SHARDS[0]], None, tmp_path)
    # found on disk under <root>/refinedweb and checked; absent and no download: the offline error
    folder = tmp_path / "root" / rw.FOLDER
    folder.mkdir(parents=True)
    (folder / "a.parquet").write_bytes(open(paths["a.parquet"], "rb").read())
    assert rw.locate(["a.parquet"], digests, tmp_path / "root") == [folder / "a.parquet"]
    with pytest.raises(DatasetNotFound, match="download"):
        rw.locate(["b.parquet"], digests, tmp_path / "root")


def test_pinned_names_and_url():
    assert len(rw.SHARDS) == len(set(rw.SHARDS)) and all(s.endswith(".parquet") and "-of-05534-" in s for s in rw.SHARDS)
    assert rw.shard_url().startswith(f"https://huggingface.co/datasets/{rw.REPO}/resolve/{rw.REVISION}/data/")
    assert len(rw.REVISION) == 40
