# ferroloader: every build, test, lint and bench command. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
FIXTURES := target/fixtures
CARGO ?= cargo
# Where `make demo` writes its report folder.
DEMO_OUT ?= report
# The photo-like JPEG generator behind the sample data, the bench corpus and the loader folder.
SAMPLE_GEN := scripts/make_bench_corpus.py python-bindings/python/ferroloader/cli/sample_data.py

.PHONY: help deps browser venv fixtures build py-build test test-rust test-python lint fmt bench loader-bench bench-torch demo fuzz clean s3-server

help: ## Show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  make %-10s %s\n", $$1, $$2}'

deps: ## Install system packages if missing (cmake, nasm for libjpeg-turbo)
	@scripts/install-deps.sh

browser: ## Install Debian's chromium and fonts if missing (the report test renders report.html)
	@scripts/install-deps.sh --browser

# --no-cache-dir: torch's wheels run to gigabytes, and a second copy in pip's cache is wasted
# on a CI disk (one CI run stopped on a full disk while installing pip).
$(VENV)/.installed: requirements-dev.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --no-cache-dir --upgrade pip
	$(PY) -m pip install -q --no-cache-dir -r requirements-dev.txt
	@touch $@

venv: $(VENV)/.installed ## Create the Python venv (Pillow reference, maturin, pytest, torch, the cli extra)

# The fixtures need only part of the venv: Pillow and numpy, for every set (the same venv, so
# `make test` installs nothing twice). The colour and geometry sets are torchvision's outputs,
# computed without torch by scripts/tv_pil_ref.py (test_fixture_drift.py checks it against
# torchvision). `make test-rust` installs no torch, build, test, lint or CLI tools.
$(VENV)/.fixtures-installed: requirements-fixtures.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --no-cache-dir -r requirements-fixtures.txt
	@touch $@

# One stamp per set: changing a script regenerates its set only.
$(FIXTURES)/decode/.done: $(VENV)/.fixtures-installed scripts/fixtures_decode.py
	$(PY) scripts/fixtures_decode.py $(FIXTURES)/decode
	@touch $@

$(FIXTURES)/resize/.done: $(VENV)/.fixtures-installed scripts/fixtures_resize.py
	$(PY) scripts/fixtures_resize.py $(FIXTURES)/resize
	@touch $@

$(FIXTURES)/color/.done: $(VENV)/.fixtures-installed scripts/fixtures_color.py scripts/tv_pil_ref.py scripts/fixtures_resize.py
	$(PY) scripts/fixtures_color.py $(FIXTURES)/color
	@touch $@

$(FIXTURES)/geometry/.done: $(VENV)/.fixtures-installed scripts/fixtures_geometry.py scripts/tv_pil_ref.py scripts/fixtures_resize.py
	$(PY) scripts/fixtures_geometry.py $(FIXTURES)/geometry
	@touch $@

FIXTURE_SETS := decode resize color geometry

fixtures: $(FIXTURE_SETS:%=$(FIXTURES)/%/.done) ## Generate the test corpus and the Pillow/torchvision reference outputs (Pillow and numpy only)

build: deps ## Build the Rust workspace
	$(CARGO) build --workspace

# s3s-fs, a real S3-compatible server over a folder, for the WebDataset tests (0.15+ needs a newer
# rustc than ours). The tests start it on a free port and find it here or at $FERROLOADER_S3S_FS.
S3S_FS := target/tools/bin/s3s-fs

$(S3S_FS):
	$(CARGO) install s3s-fs --version 0.14.1 --features binary --locked --root target/tools

s3-server: $(S3S_FS) ## Install the local S3 test server (s3s-fs) into target/tools

test-rust: deps fixtures $(FIXTURES)/folder/.done s3-server ## Rust tests only
	$(CARGO) test --workspace
	$(CARGO) test -p ferroloader-profiler --features tracing

py-build: deps venv ## Build the Python extension into the venv (release)
	$(PY) -m maturin develop -q --release -m python-bindings/Cargo.toml

# test_packaging.py's `slow` test builds a wheel (relinking py-build's release build) and installs
# it into a fresh venv, numpy and the cli extra from pip's index: PYTEST_ARGS='-m "not slow"' skips it.
test-python: py-build fixtures $(FIXTURES)/folder/.done browser s3-server ## Python tests (pytest, warnings are errors)
	$(PY) -m pytest python-bindings/tests -W error --timeout 120 -q --durations=15 $(PYTEST_ARGS)

test: test-rust test-python ## Run every test (installs what it needs first)

fmt: ## Format the Rust code
	$(CARGO) fmt --all

lint: deps py-build ## rustfmt, clippy with warnings as errors, mypy (--strict for the package) and stubtest
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(PY) -m mypy --strict python-bindings/python/ferroloader
	$(PY) -m mypy scripts
	$(PY) -m mypy.stubtest --mypy-config-file python-bindings/stubtest.ini ferroloader._native

$(FIXTURES)/bench/.done: $(VENV)/.fixtures-installed $(SAMPLE_GEN)
	$(PY) scripts/make_bench_corpus.py $(FIXTURES)/bench
	@touch $@

# An ImageFolder of ImageNet-like JPEGs (8 classes) for loader throughput runs.
$(FIXTURES)/folder/.done: $(VENV)/.fixtures-installed $(SAMPLE_GEN)
	$(PY) scripts/make_bench_corpus.py $(FIXTURES)/folder 512 --classes 8
	@touch $@

loader-bench: deps $(FIXTURES)/folder/.done ## Loader throughput vs a plain loop, 1..cores workers, 4 epochs
	$(CARGO) run --release -p ferroloader-loader --example throughput -- $(FIXTURES)/folder --epochs 4

bench: deps $(FIXTURES)/bench/.done ## criterion benches (ops, fused vs op-by-op), then ratios
	$(CARGO) bench --bench transforms
	$(PY) scripts/bench_ratios.py target/criterion 48
	$(CARGO) bench --bench train_ratio
	$(CARGO) bench --bench loader_profile

bench-torch: py-build $(FIXTURES)/folder/.done ## ferroloader vs the torchvision DataLoader, alternating rounds, ratio (RECIPE=ta_wide+re: a reference preset)
	$(PY) scripts/bench_vs_torch.py $(FIXTURES)/folder --overhead $(if $(RECIPE),--recipe $(RECIPE))

# Builds, generates the sample ImageFolder once (cached in $$XDG_CACHE_HOME/ferroloader or
# ~/.cache/ferroloader), profiles torchvision's DataLoader and ferroloader on it, writes the report.
demo: py-build ## Compare torchvision and ferroloader on generated sample data; report in report/
	$(PY) -m ferroloader demo --out $(DEMO_OUT)
	@echo "demo: open $(abspath $(DEMO_OUT))/report.html in a browser"

# The long fuzzing run (the short one is the proptest files transforms/tests/fuzz_*.rs, run by
# `make test`; `PROPTEST_CASES=20000 cargo test -p ferroloader-transforms --test fuzz_decode`
# runs those longer). Each cargo-fuzz target runs FUZZ_SECONDS, seeded from the decode corpus
# and fuzz/seeds; new inputs stay in fuzz/corpus, crashes land in fuzz/artifacts (reproduce:
# `cargo fuzz run --sanitizer none <target> <file>`). `--sanitizer none` works on the stable
# toolchain; for AddressSanitizer over our Rust code use
# `RUSTC_BOOTSTRAP=1 make fuzz FUZZ_FLAGS=` (libjpeg-turbo's C is not instrumented either way).
FUZZ_SECONDS ?= 300
FUZZ_TARGETS ?= decode spec
FUZZ_FLAGS ?= --sanitizer none

fuzz: deps fixtures ## Long fuzz run: each cargo-fuzz target FUZZ_SECONDS (300) seconds, installs cargo-fuzz
	@$(CARGO) fuzz --version >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	@mkdir -p fuzz/corpus/decode fuzz/corpus/spec
	find $(FIXTURES)/decode -maxdepth 1 -type f -size -64k \( -name '*.jpg' -o -name '*.png' \
	    -o -name '*.gif' -o -name '*.bmp' -o -name '*.tif' -o -name '*.webp' \) \
	    -exec cp {} fuzz/corpus/decode/ \;
	cp fuzz/seeds/spec/*.json fuzz/corpus/spec/
	for target in $(FUZZ_TARGETS); do \
	    $(CARGO) fuzz run $(FUZZ_FLAGS) $$target fuzz/corpus/$$target -- \
	        -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=60 -dict=fuzz/$$target.dict \
	        -print_final_stats=1 || exit 1; \
	done

clean: ## Remove build outputs and fixtures
	$(CARGO) clean
