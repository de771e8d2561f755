"""common/data/text_lm.py (issue #46): documents, the split rule, tokenisers, token streams."""
import numpy as np
import pytest
import torch

from common.data.download import DatasetNotFound
from common.data.text_lm import BPETokenizer, CharTokenizer, documents, split_documents, token_stream


def test_fortune_entries(tmp_path):
    (tmp_path / "b").write_text("second file\n%\n")
    (tmp_path / "a").write_text("\nfirst\n  indented\n\n%\n%\n\n% not a separator\nlast\n%\n   \n%\n")
    (tmp_path / "a.dat").write_bytes(b"\x00\x01")
    (tmp_path / "a.u8").write_text("skipped\n%\n")
    assert documents("fortunes", root=tmp_path) == ["first\n  indented", "% not a separator\nlast", "second file"]
    with pytest.raises(DatasetNotFound, match="apt-get install"):
        documents("fortunes", root=tmp_path / "missing")
    with pytest.raises(ValueError, match="unknown text source"):
        documents("wiki")


def test_pydoc_documents():
    from pydoc_data.topics import topics
    docs = documents("pydoc")
    assert docs == [topics[k] for k in sorted(topics)]


@pytest.mark.parametrize("n,f,seed", [(10, 0.1, 0), (37, 0.25, 3), (2, 0.1, 1), (1000, 0.1, 0)])
def test_split_rule(n, f, seed):
    docs = [f"d{i}" for i in range(n)]
    train, val = split_documents(docs, f, seed)
    n_val = max(1, round(f * n))
    idx = np.random.default_rng(seed).permutation(n)[:n_val]
    assert val == [docs[i] for i in sorted(idx)]                  # original order
    assert train == [d for i, d in enumerate(docs) if i not in set(idx.tolist())]
    assert len(train) + len(val) == n and not set(train) & set(val)


def test_split_errors():
    with pytest.raises(ValueError, match="val_fraction"):
        split_documents(["a", "b"], 1.0)
    with pytest.raises(ValueError, match="val_fraction"):
        split_documents(["a", "b"], 0.0)
    with pytest.raises(ValueError, match="at least 2"):
        split_documents(["a"], 0.5)


def test_char_tokenizer_round_trip():
    tok = CharTokenizer.from_texts(["hello", "world!"])
    assert tok.chars == sorted(set("helloworld!")) and tok.vocab_size == len(set("helloworld!")) + 1
    assert tok.encode("!") == [1]                     # sorted characters are 1..V
    assert tok.decode(tok.encode("wheel!")) == "wheel!"
    assert tok.encode("hz") == [tok.stoi["h"], 0]     # unseen -> 0
    assert tok.decode(torch.tensor([0])) == CharTokenizer.UNKNOWN


def test_bpe_tokenizer_lossless():
    pytest.importorskip("tokenizers")
    texts = documents("pydoc")[:20]
    tok = BPETokenizer.train(texts, vocab_size=300)
    assert 256 < tok.vocab_size <= 300
    for s in ["plain ascii", "ünïcödé 🙂 \t\n\n  spaces", texts[3][:500]]:
        assert tok.decode(tok.encode(s)) == s
    assert len(tok.encode(texts[0][:2000])) < len(texts[0][:2000].encode())   # merges compress
    with pytest.raises(ValueError, match="256"):
        BPETokenizer.train(texts, vocab_size=100)


def test_token_stream():
    tok = CharTokenizer.from_texts(["ab", "c\n"])
    s = token_stream(["ab", "c"], tok)
    assert s.dtype == torch.long and tok.decode(s) == "ab\n\nc"
    assert tok.decode(token_stream(["ab", "c"], tok, sep="\n")) == "ab\nc"
    with pytest.raises(ValueError):
        token_stream([], tok)
