"""Synthetic stand-ins for every dataset and pretrained network a paper-tier config reads, so that
a GPU check (`scripts/gpu_check.sh`, `reproduce.py --gpu-smoke`) runs each paper config for a few
steps on an offline machine, at the paper's shapes.

Nothing here is imported by a method or a table: `install()` patches the loaders of `common.data`,
`common.nn.llm`, timm and transformers in the calling process only (the gpu-smoke process), and
undoes it on `uninstall()`. The dataset configs and `common/data` stay as they are, so no table's
code fingerprint changes. What each stand-in is:

- images (the registry names): uniform random uint8 images of the dataset's shape and balanced
  labels over its classes (`IMAGES`), `n_train` / `n_test` of them; ImageNet's streamed training
  split (`common.data.imagenet_stream.ImageNetTrainStream`): `ImageStream`, `n_train` of them a pass;
- hypergraphs: `common.data.hypergraphs.synthetic_hypergraph` with the named graph's vertex count,
  classes and feature width (`HYPERGRAPHS`); the hypergraph-reconstruction pairs (`find_or_fetch`
  of their train.txt / test.txt) written from a synthetic hypergraph;
- crystals (JARVIS, MP): random cells of 2-16 atoms (`crystals`);
- anomaly-detection tables (ADBench, ODDS): Gaussian inliers and shifted outliers;
- Earth events: random points on the sphere; MNIST idx files (`find_or_fetch("mnist")`) written;
- text (C4, WikiText2, pydoc, fortunes): random words; RefinedWeb's reader (`TextReader`): random
  token windows; language models named by a Hub id: the model's architecture from `HF_CONFIGS`,
  randomly initialised, and a word-hash tokenizer (also for the Hub tokenizers of `TOKENIZERS`);
- timm models: `pretrained=False` (timm knows the architecture offline); GLUE: `glue_splits` below,
  random tokens (a config points `method.glue.data._target_` here; see `CONFIG_OVERRIDES`).

Weights that cannot be loaded offline are randomly initialised, so a smoke measures memory and step
time at the paper's shapes; its metrics mean nothing.
"""
from __future__ import annotations

import gzip
import hashlib
import struct
import tempfile
from pathlib import Path

import numpy as np
import torch

# name -> (channels, height, width, classes): the registry's image datasets
IMAGES = {
    "fashion_mnist": (1, 28, 28, 10), "digits": (1, 8, 8, 10), "mnist5k": (1, 28, 28, 10), "mnist": (1, 28, 28, 10),
    "cifar10": (3, 32, 32, 10), "cifar100": (3, 32, 32, 100), "stl10": (3, 96, 96, 10), "tinyimagenet": (3, 64, 64, 200),
    "svhn": (3, 32, 32, 10), "imagenet": (3, 224, 224, 1000),
}
# name -> (train, test) images of the real dataset: a stand-in has as many, up to n_train / n_test
# (a long-tailed CIFAR-100 needs its 500 images per class, federated splits their per-class counts)
SIZES = {"fashion_mnist": (60000, 10000), "digits": (1437, 360), "mnist5k": (4000, 1000), "mnist": (60000, 10000),
         "cifar10": (50000, 10000), "cifar100": (50000, 10000), "stl10": (5000, 8000), "tinyimagenet": (100000, 10000),
         "svhn": (73257, 26032), "imagenet": (1281167, 50000)}
# name -> (vertices, classes, feature width): the HyperGCN graphs (Table 3 of LightHGNN)
HYPERGRAPHS = {"cocitation_cora": (2708, 7, 1433), "cocitation_citeseer": (3312, 6, 3703),
               "coauthorship_cora": (2708, 7, 1433), "coauthorship_dblp": (43413, 6, 1425),
               "cocitation_pubmed": (19717, 3, 500)}
# the hypergraph-reconstruction datasets of SHyRe: name -> vertices (sizes of the official files)
RECONSTRUCTION = {"crime": 510, "dblp": 2000, "directors": 510, "enron": 4423, "foursquare": 2000,
                  "hosts": 1000, "school2": 327, "school": 242}
# Hub id -> (transformers config class, its arguments): the architectures the paper configs name
HF_CONFIGS = {
    "huggyllama/llama-7b": ("LlamaConfig", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                                num_attention_heads=32, vocab_size=32000, max_position_embeddings=2048)),
    "huggyllama/llama-13b": ("LlamaConfig", dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                                 num_attention_heads=40, vocab_size=32000, max_position_embeddings=2048)),
    "meta-llama/Llama-2-7b-hf": ("LlamaConfig", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                                     num_attention_heads=32, vocab_size=32000,
                                                     max_position_embeddings=4096)),
    "tiiuae/falcon-7b": ("FalconConfig", dict(hidden_size=4544, num_attention_heads=71, num_hidden_layers=32,
                                              vocab_size=65024, multi_query=True, parallel_attn=True, bias=False,
                                              new_decoder_architecture=False, alibi=False)),
    "bert-base-cased": ("BertConfig", dict(vocab_size=28996)),
    "bert-base-uncased": ("BertConfig", dict(vocab_size=30522)),
}
# Hub tokenizer id -> vocabulary: a word-hash stand-in of that size (AutoTokenizer.from_pretrained)
TOKENIZERS = {"facebook/opt-1.3b": 50265}
SHRINK = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
          "vocab_size": 512}

_SAVED: list[tuple[object, str, object]] = []
STATE = {"n_train": 4096, "n_test": 1024, "shrink": False, "used": set(), "tmp": None}


def _gen(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))


def images(name: str, split: str, n: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(uint8 (n, C, H, W), int64 labels (n,)) of dataset `name`'s shape."""
    if name not in IMAGES:
        raise ValueError(f"no synthetic shape for image dataset '{name}'; known: {sorted(IMAGES)}")
    c, h, w, k = IMAGES[name]
    cap = STATE["n_train"] if split == "train" else STATE["n_test"]
    n = n or min(cap, SIZES[name][0 if split == "train" else 1])
    g = _gen(f"{name}/{split}")
    STATE["used"].add(f"images:{name}")
    labels = (torch.arange(n) % k)[torch.randperm(n, generator=g)]        # balanced: n/k per class
    return torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.uint8), labels


class ImageStream(torch.utils.data.IterableDataset):
    """Stand-in for common.data.imagenet_stream.ImageNetTrainStream, with its arguments (those of the
    archive ignored): `n_train` random uint8 (3, side, side) ImageNet images a pass, labels balanced
    over the 1,000 classes, sharded as the real stream is, over ranks x DataLoader workers (shard
    rank * workers + worker of S takes positions s, s + S, ... of the pass's order), each image a pure
    function of (seed, epoch, index), so that every shard draws the same pass wherever it runs."""

    def __init__(self, root="data", download=False, side: int = 224, shuffle_buffer: int = 10_000,
                 interleave: int = 16, seed: int = 0, rank: int = 0, world_size: int = 1, stream: bool = False,
                 transform=None):
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank must lie in [0, world_size) with world_size >= 1, got rank {rank} of {world_size}")
        self.side, self.seed, self.epoch = int(side), int(seed), 0
        self.rank, self.world_size = int(rank), int(world_size)
        self.n = min(STATE["n_train"], SIZES["imagenet"][0])
        STATE["used"].add("stream:imagenet")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        shards, shard = self.world_size * workers, self.rank * workers + worker
        order = torch.randperm(self.n, generator=_gen(f"imagenet-stream/{self.seed}/{self.epoch}"))
        classes = IMAGES["imagenet"][3]
        for i in order[shard::shards].tolist():
            g = _gen(f"imagenet-stream/{self.seed}/{self.epoch}/{i}")
            yield torch.randint(0, 256, (3, self.side, self.side), generator=g, dtype=torch.uint8), i % classes


def crystals(n: int = 4096, max_atoms: int = 16, seed: int = 0) -> list[dict]:
    """Random cells: lattice 4-8 Å cubic-ish, 2-`max_atoms` atoms of Z 1-83, a Gaussian target."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(2, max_atoms + 1))
        lattice = np.diag(rng.uniform(4, 8, 3)) + rng.normal(0, 0.2, (3, 3))
        frac = rng.uniform(0, 1, (k, 3))
        out.append({"z": rng.integers(1, 84, k).astype(np.int64), "pos": frac @ lattice, "lattice": lattice,
                    "target": float(rng.normal()), "formula": "synthetic"})
    STATE["used"].add("crystals")
    return out


def anomaly_table(name: str, n: int = 2000, d: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian inliers, 5% outliers shifted by 3 in every feature; y = 1 for an outlier. The width is
    the config's `dataset.num_features[name]` when the smoke passed its config (`configure`), else 20."""
    d = d or int((STATE.get("num_features") or {}).get(name, 20))
    rng = np.random.default_rng(int(hashlib.sha256(name.encode()).hexdigest()[:8], 16))
    y = (rng.uniform(size=n) < 0.05).astype(np.int64)
    x = rng.normal(size=(n, d)) + 3.0 * y[:, None]
    STATE["used"].add(f"table:{name}")
    return x, y


def words(n_words: int = 400_000, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    vocab = ["".join(chr(97 + c) for c in rng.integers(0, 26, int(rng.integers(2, 9)))) for _ in range(5000)]
    STATE["used"].add("text")
    return " ".join(vocab[i] for i in rng.integers(0, len(vocab), n_words))


class WordTokenizer:
    """Each whitespace word -> a token id by hash, within the model's vocabulary (a stand-in for
    the Hub tokenizer; enough for calibration windows and perplexity windows)."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.eos_token_id, self.pad_token_id = 1, 0

    def __len__(self) -> int:
        return self.vocab_size

    def __call__(self, text, return_tensors="pt", **_):
        ids = [2 + int(hashlib.md5(w.encode()).hexdigest()[:6], 16) % (self.vocab_size - 2) for w in str(text).split()]
        return type("Encoding", (), {"input_ids": torch.tensor([ids], dtype=torch.long)})()


class TextReader:
    """Stand-in for common.data.refinedweb.RefinedWeb (its arguments; shards and digests ignored):
    random token windows within the tokenizer's vocabulary, `train_batches` a pure function of the step."""

    def __init__(self, *args, tokenizer=None, **kwargs):
        self.tokenizer = tokenizer
        STATE["used"].add("text:refinedweb")

    @staticmethod
    def _vocab(tok) -> int:
        return int(getattr(tok, "vocab_size", None) or len(tok))

    def val_windows(self, tok, seq_len: int, n: int) -> torch.Tensor:
        return torch.randint(2, self._vocab(tok), (n, seq_len), generator=_gen("refinedweb/val"))

    def train_batches(self, tok, seq_len: int, batch_size: int):
        vocab = self._vocab(tok)
        return lambda step: torch.randint(2, vocab, (batch_size, seq_len), generator=_gen(f"refinedweb/train/{step}"))


def hf_config(name: str, **extra):
    import transformers

    if name not in HF_CONFIGS:
        raise ValueError(f"no offline architecture for '{name}'; add it to common.reproduce.synthetic.HF_CONFIGS")
    cls, kwargs = HF_CONFIGS[name]
    kwargs = dict(kwargs, **extra)
    if STATE["shrink"]:
        kwargs.update({k: v for k, v in SHRINK.items() if k in kwargs or cls == "BertConfig"})
    STATE["used"].add(f"random-init:{name}")
    return getattr(transformers, cls)(**kwargs)


def load_causal_lm(name: str, dtype: str = "float32"):
    """The Hub model's architecture, randomly initialised (on CUDA when there is one: a 13B model's
    CPU initialisation alone would take minutes), and a word-hash tokenizer."""
    import transformers

    cfg = hf_config(name)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    model.config.use_cache = False
    return model.eval(), WordTokenizer(cfg.vocab_size)


def glue_splits(task: str = "sst2", tokenizer: str = "bert-base-cased", max_length: int = 128) -> dict:
    """GLUE's shapes (padded (N, max_length) token tensors) with random tokens and labels."""
    labels = {"sst2": 2, "mnli": 3, "qqp": 2}.get(task, 2)
    vocab = HF_CONFIGS.get(tokenizer, ("", {"vocab_size": 28996}))[1]["vocab_size"]
    if STATE["shrink"]:
        vocab = SHRINK["vocab_size"]

    def split(n, name):
        g = _gen(f"glue/{task}/{name}")
        ids = torch.randint(0, vocab, (n, max_length), generator=g)
        enc = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
        return enc, torch.randint(0, labels, (n,), generator=g)

    STATE["used"].add(f"glue:{task}")
    return {"train": split(STATE["n_train"], "train"), "test": split(STATE["n_test"], "test")}


def _write_idx(path: Path, array: np.ndarray) -> None:
    code = {np.dtype(np.uint8): 0x08}[array.dtype]
    header = struct.pack(">BBBB", 0, 0, code, array.ndim) + b"".join(struct.pack(">I", d) for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


def _tmp() -> Path:
    if STATE["tmp"] is None:
        STATE["tmp"] = tempfile.TemporaryDirectory(prefix="synthetic_data_")
    return Path(STATE["tmp"].name)


def _synthetic_folder(name: str, files) -> Path | None:
    """A folder holding synthetic versions of `files` for the datasets reached through
    `find_or_fetch`: MNIST's idx files and SHyRe's hyperedge lists; None for any other."""
    folder = _tmp() / "fetch" / name
    folder.mkdir(parents=True, exist_ok=True)
    if name == "mnist":
        for split, prefix in (("train", "train"), ("test", "t10k")):
            x, y = images("mnist", split)
            _write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", x[:, 0].numpy())
            _write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", y.numpy().astype(np.uint8))
        return folder
    if name in RECONSTRUCTION:
        from common.data.hypergraphs import synthetic_hypergraph

        edges = synthetic_hypergraph(RECONSTRUCTION[name], 5, feature_dim=4, edges_per_vertex=1.0).edges
        edges = [sorted(int(v) for v in e) for e in edges]
        half = len(edges) // 2
        (folder / "train.txt").write_text("\n".join(" ".join(map(str, e)) for e in edges[:half]) + "\n")
        (folder / "test.txt").write_text("\n".join(" ".join(map(str, e)) for e in edges[half:]) + "\n")
        STATE["used"].add(f"hyperedges:{name}")
        return folder
    return None


_MISSING = object()


def _patch(obj, attr: str, value) -> None:
    # a class keeps its own descriptor (a classmethod inherited from a base is deleted again on undo)
    _SAVED.append((obj, attr, obj.__dict__.get(attr, _MISSING) if isinstance(obj, type) else getattr(obj, attr)))
    setattr(obj, attr, value)


def install(n_train: int = 4096, n_test: int = 1024, shrink: bool = False) -> None:
    """Patch the loaders (see the module docstring). `shrink` (the CPU test of the GPU check) also
    makes the Hub architectures tiny. Call before the methods are imported: they bind some loaders
    by name at import."""
    if _SAVED:
        uninstall()
    STATE.update(n_train=n_train, n_test=n_test, shrink=shrink, used=set())
    import common.data as data
    from common.data import adbench, crystals as cdata, download, hypergraphs, manifold_data, mnist_full, tabular, text
    from common.data import imagenet, imagenet_stream, refinedweb, svhn, tinyimagenet
    from common.nn import llm

    del imagenet, mnist_full, svhn, tinyimagenet   # imported for their registrations, which the loop below replaces
    for name in IMAGES:
        data.REGISTRY.setdefault(name, None)
        _SAVED.append((data.REGISTRY, name, data.REGISTRY[name]))
        data.REGISTRY[name] = (lambda n: lambda split, root, download: images(n, split))(name)

    def load_hypergraph(name, root="data", download=False, verify=True):
        v, k, d = HYPERGRAPHS.get(name, (2000, 5, 64))
        STATE["used"].add(f"hypergraph:{name}")
        return hypergraphs.synthetic_hypergraph(v, k, feature_dim=d)
    _patch(hypergraphs, "load_hypergraph", load_hypergraph)

    real_find = download.find_or_fetch

    def find_or_fetch(name, candidates, files, url, download_, *args, **kwargs):
        try:
            return real_find(name, candidates, files, url, download_, *args, **kwargs)
        except Exception:
            folder = _synthetic_folder(name, files)
            if folder is None:
                raise
            return folder
    _patch(download, "find_or_fetch", find_or_fetch)
    _patch(cdata, "load_jarvis", lambda name, target, root, download: crystals(seed=len(name)))
    _patch(adbench, "load_adbench", lambda name, root="data", download=False: anomaly_table(name))
    _patch(tabular, "load_tabular", lambda name, root="data", download=False: anomaly_table(name))
    _patch(manifold_data, "load_earth", lambda name, root="data", download=False: _sphere(name))
    _patch(text, "load_text", lambda name, split="test": words(seed=int(_gen(f"{name}/{split}").initial_seed()) % 1000))
    _patch(llm, "load_causal_lm", load_causal_lm)
    _patch(imagenet_stream, "ImageNetTrainStream", ImageStream)   # instantiate() looks the _target_ up at call time
    _patch(refinedweb, "RefinedWeb", TextReader)
    _patch_hub()


def _sphere(name: str, n: int = 20000) -> torch.Tensor:      # > the paper batch (8192) after the splits
    x = torch.randn(n, 3, generator=_gen(f"earth/{name}"), dtype=torch.float64)
    STATE["used"].add(f"earth:{name}")
    return x / x.norm(dim=1, keepdim=True)


def _patch_hub() -> None:
    """timm: never download weights; transformers: `from_pretrained` of a known Hub id builds the
    architecture from `HF_CONFIGS`, randomly initialised."""
    try:
        import timm
    except ImportError:
        timm = None
    if timm is not None:
        real_create = timm.create_model

        def create_model(name, pretrained=False, **kwargs):
            if pretrained:
                STATE["used"].add(f"random-init:{name}")
            return real_create(name, pretrained=False, **kwargs)
        _patch(timm, "create_model", create_model)
    try:
        import transformers
    except ImportError:
        return
    for auto in ("AutoModelForSequenceClassification", "AutoModelForCausalLM", "AutoModel"):
        cls = getattr(transformers, auto)
        real = cls.from_pretrained

        def from_pretrained(name, *args, _cls=cls, _real=real, **kwargs):
            if str(name) not in HF_CONFIGS:
                return _real(name, *args, **kwargs)
            extra = {k: kwargs.pop(k) for k in ("num_labels",) if k in kwargs}
            kwargs = {k: v for k, v in kwargs.items() if k in ("dtype", "torch_dtype")}
            return _cls.from_config(hf_config(str(name), **extra), **kwargs)
        _patch(cls, "from_pretrained", from_pretrained)
    real_tokenizer = transformers.AutoTokenizer.from_pretrained

    def tokenizer_from_pretrained(pretrained_model_name_or_path, *args, **kwargs):   # the name Hydra passes
        name = pretrained_model_name_or_path
        if str(name) not in TOKENIZERS:
            return real_tokenizer(name, *args, **kwargs)
        STATE["used"].add(f"tokenizer:{name}")
        return WordTokenizer(SHRINK["vocab_size"] if STATE["shrink"] else TOKENIZERS[str(name)])
    _patch(transformers.AutoTokenizer, "from_pretrained", tokenizer_from_pretrained)
    real_config = transformers.AutoConfig.from_pretrained

    def config_from_pretrained(name, *args, **kwargs):
        if str(name) not in HF_CONFIGS:
            return real_config(name, *args, **kwargs)
        return hf_config(str(name), **{k: v for k, v in kwargs.items() if k == "num_labels"})
    _patch(transformers.AutoConfig, "from_pretrained", config_from_pretrained)


def configure(cfg) -> None:
    """What a stand-in reads from the run's config: the tables' feature counts (`dataset.num_features`)."""
    ds = cfg.get("dataset") if hasattr(cfg, "get") else None
    nf = ds.get("num_features") if ds is not None and hasattr(ds, "get") else None
    STATE["num_features"] = dict(nf) if nf is not None and hasattr(nf, "items") else {}


def uninstall() -> None:
    while _SAVED:
        obj, attr, value = _SAVED.pop()
        if isinstance(obj, dict):
            if value is None:
                obj.pop(attr, None)
            else:
                obj[attr] = value
        elif value is _MISSING:
            delattr(obj, attr)
        else:
            setattr(obj, attr, value)
    if STATE["tmp"] is not None:
        STATE["tmp"].cleanup()
        STATE["tmp"] = None


def used() -> list[str]:
    """What the stand-ins served since `install` (for the smoke's JSON)."""
    return sorted(STATE["used"])
