# The project's front door. `make` lists the targets; `make test` is what CI runs.
#
# Three toolchains, each installed once and stamped, so a second run installs nothing:
#   .venv          the project and its dev tools (pip install -e '.[dev]'), redone when pyproject.toml changes
#   .venv-sam      aws-sam-cli alone: it pins its own boto3/botocore, which must not fight moto's
#   node_modules   asl-validator, pinned by package-lock.json
#   .venv-localstack  LocalStack's Python runtime (python3.13), for make deploy-rehearsal only
# Nothing here talks to AWS: the template checks run offline, with no account and no Docker.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:
MAKEFLAGS += --no-builtin-rules --no-print-directory

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAM_CLI_VERSION := 1.170.0
SAM_VENV := .venv-sam
SAM := $(SAM_VENV)/bin/sam
ASL_VALIDATOR := node_modules/.bin/asl-validator
STATE_MACHINES := $(wildcard statemachine/*.asl.json)
SAM_BUILD_DIR := .aws-sam/build-check
SAM_CACHE_DIR := .aws-sam/cache-check
# The deploy rehearsal's CloudFormation engine. scripts/rehearsal/localstack_host.py is written against
# this version (tests/rehearsal/test_localstack_contract.py checks both agree). Its runtime takes newer
# cbor2, pyOpenSSL and cryptography than it works with, and needs service-identity for its TLS listener
# without requiring it (service-identity 26 wants a cryptography this pyOpenSSL refuses).
LOCALSTACK_VERSION := 2026.3.0
LOCALSTACK_VENV := .venv-localstack
LOCALSTACK_PINS := 'cbor2<6' 'pyopenssl<26' 'cryptography<47' 'service-identity<26'

# The SAM CLI reads no account here: no telemetry, no instance metadata, dummy credentials so that
# nothing falls back to looking for real ones, a fixed region.
SAM_ENV := SAM_CLI_TELEMETRY=0 AWS_EC2_METADATA_DISABLED=true AWS_DEFAULT_REGION=us-east-1 \
	AWS_ACCESS_KEY_ID=offline AWS_SECRET_ACCESS_KEY=offline

# sam build without a container needs the functions' runtime (python3.13) on PATH. The default is the
# first that runs of: python3.13 on PATH, then pyenv's 3.13 builds. Override with PYTHON313=/path/to/python3.13.
PYTHON313 ?= $(shell for p in python3.13 $$(pyenv root 2>/dev/null)/versions/3.13*/bin/python3.13; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 13); print(sys.executable)' 2>/dev/null && break; \
	done)

.PHONY: help install tools lint check-template sam-build unit test demo chromium clean clean-all lock checkov localstack deploy-rehearsal deploy

# A folder's unpacked size (the sum of its files' sizes, as in the zip), in the units du -h prints: GNU
# du's --apparent-size is not in BSD's (macOS) du, and -A is not in GNU's.
export APPARENT_SIZE := import os, sys; total = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(sys.argv[1]) for f in fs); \
	size = next((f"{total / 1024**i:.1f}{u}" for i, u in ((3, "G"), (2, "M"), (1, "K")) if total >= 1024**i), f"{total}B"); print(size)

# uv, for `make lock` only (it resolves for another platform than this machine's, which pip-compile cannot).
UV_VERSION := 0.13.9
UV_VENV := .venv-uv
UV := $(UV_VENV)/bin/uv

help: ## List the targets (the default)
	@echo "Usage: make TARGET"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z0-9-]*:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

install: $(VENV)/.installed ## Create .venv (python3 >= 3.11) with the project and its dev tools

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else \
		"error: $(PYTHON) is Python " + sys.version.split()[0] + "; 3.11 or newer is needed (make PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

tools: $(SAM_VENV)/.installed-$(SAM_CLI_VERSION) node_modules/.installed ## Install the template toolchain: SAM CLI (.venv-sam) and asl-validator (node_modules)

$(SAM_VENV)/.installed-$(SAM_CLI_VERSION):
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/python -m pip install --quiet 'aws-sam-cli==$(SAM_CLI_VERSION)'
	@rm -f $(SAM_VENV)/.installed-*
	@touch $@

node_modules/.installed: package.json package-lock.json
	@command -v npm >/dev/null || { echo "error: npm not found (Debian: apt-get install nodejs npm)" >&2; exit 1; }
	npm ci --no-audit --no-fund --loglevel=warn
	@touch $@

lint: install ## ruff check, ruff format --check, mypy (strict; the code, tests and scripts: pyproject.toml), and over the benchmarks
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mypy bench

# asl-validator sees the definition before substitution: the $${...} DefinitionSubstitutions sit in
# Parameters.FunctionName strings, which it accepts as strings, and in Task Resource ARNs
# (arn:$${Partition}:states:::lambda:invoke), which it does not: those are checked with the aws partition
# filled in. cfn-lint and sam validate do not look inside a DefinitionUri file, hence the validator.
check-template: install tools ## cfn-lint, asl-validator, sam validate --lint (template.yaml, operations.yaml), then sam-build
	$(BIN)/cfn-lint template.yaml operations.yaml
	@test -n "$(STATE_MACHINES)" || { echo "error: no statemachine/*.asl.json" >&2; exit 1; }
	@mkdir -p .aws-sam/asl-check
	@for definition in $(STATE_MACHINES); do \
		checked=".aws-sam/asl-check/$$(basename "$$definition")"; \
		sed 's/arn:\$${Partition}:/arn:aws:/g' "$$definition" > "$$checked"; \
		echo "$(ASL_VALIDATOR) --json-path $$definition (Partition=aws)"; $(ASL_VALIDATOR) --json-path "$$checked"; \
	done
	$(SAM_ENV) $(SAM) validate --lint --region us-east-1 --template-file template.yaml
	$(SAM_ENV) $(SAM) validate --lint --region us-east-1 --template-file operations.yaml
	@$(MAKE) sam-build

sam-build: tools ## sam build (no container) into .aws-sam/build-check, and print each function's size
	@py313="$(PYTHON313)"; \
	if [ -z "$$py313" ]; then \
		echo "error: sam build needs python3.13 (the functions' runtime): install it (pyenv install 3.13)" \
			"or point PYTHON313 at one" >&2; \
		exit 1; \
	fi; \
	echo "sam build with $$py313"; \
	PATH="$$(dirname "$$py313"):$$PATH" $(SAM_ENV) $(SAM) build --template-file template.yaml \
		--build-dir $(SAM_BUILD_DIR) --cache-dir $(SAM_CACHE_DIR) --cached --parallel --no-use-container --region us-east-1
	@echo "Built functions (unpacked size, files):"
	@for dir in $(SAM_BUILD_DIR)/*/; do \
		[ -f "$$dir/template.yaml" ] && continue; \
		printf "  %-24s %6s  %5s files\n" "$$(basename "$$dir")" "$$($(BIN)/python -c "$$APPARENT_SIZE" "$$dir")" "$$(find "$$dir" -type f | wc -l)"; \
	done

$(UV_VENV)/.installed-$(UV_VERSION):
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/python -m pip install --quiet 'uv==$(UV_VERSION)'
	@rm -f $(UV_VENV)/.installed-*
	@touch $@

lock: $(UV_VENV)/.installed-$(UV_VERSION) ## Re-lock functions/requirements.txt (hashes) from functions/requirements.in for the template's architecture
	@$(MAKE) -C functions lock UV="$(abspath $(UV))"

# checkov has its own venv (.venv-checkov: it pins a boto3 older than the project's), installed by the script
# on its first run (about 40 s) and stamped; a scan then takes about 10 s. Fails on any failed check.
checkov: ## checkov on template.yaml and operations.yaml (own venv, .venv-checkov): every finding fixed or skipped with its reason
	bash scripts/checkov.sh

# pytest, where collecting no test is a failure (exit 5 would otherwise read as "nothing to do").
PYTEST = run_pytest() { $(BIN)/python -m pytest "$$@" || { \
		rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit 5): that is a failure here" >&2; fi; \
		return $$rc; \
	}; }; run_pytest

# The product's tiers: its unit tests, its functional tests (moto's DynamoDB) and the state machine's
# (the real ASL, the real handlers in every step). make unit is the quick loop: the first two without
# their `bulk` tests (a provider account of a hundred thousand PaymentIntents each). make test runs
# all three under coverage, in-process, and reports the branch coverage of functions/; it fails under
# [tool.coverage.report] fail_under (pyproject.toml). The other tiers (the local tooling, the model
# checker, the static checks, and tests/conformance: the local Step Functions engine held to AWS's
# documented rules) then run without it: they exercise functions/ or the engine, but are not its tests.
UNIT_TIERS := tests/unit tests/functional
PRODUCT_TIERS := $(UNIT_TIERS) tests/statemachine

unit: install ## The quick loop: the product's unit and functional tests (no SAM CLI, npm or python3.13)
	@$(PYTEST) $(UNIT_TIERS) -m "not slow and not rehearsal and not bulk" -p no:cacheprovider

test: install tools lint check-template checkov chromium ## Everything CI runs: lint, template checks, checkov, pytest with the coverage of functions/ (not the slow tests)
	@$(PYTEST) $(PRODUCT_TIERS) -m "not slow and not rehearsal" --cov --cov-report=term
	@$(PYTEST) -m "not slow and not rehearsal" $(addprefix --ignore=,$(PRODUCT_TIERS))

# LocalStack's runtime on this host (no Docker), in its own venv: python3.13, like the functions' build.
localstack: $(LOCALSTACK_VENV)/.installed-$(LOCALSTACK_VERSION) ## Install LocalStack's Python runtime (.venv-localstack) for the rehearsal

$(LOCALSTACK_VENV)/.installed-$(LOCALSTACK_VERSION):
	@test -n "$(PYTHON313)" || { echo "error: LocalStack runs here on python3.13: install it (pyenv install 3.13)" \
		"or point PYTHON313 at one" >&2; exit 1; }
	"$(PYTHON313)" -m venv $(LOCALSTACK_VENV)
	$(LOCALSTACK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCALSTACK_VENV)/bin/python -m pip install --quiet 'localstack-core[runtime]==$(LOCALSTACK_VERSION)' $(LOCALSTACK_PINS)
	@rm -f $(LOCALSTACK_VENV)/.installed-*
	@touch $@

# The real `sam deploy` of the built template against LocalStack's CloudFormation engine, started on
# 127.0.0.1 by tests/rehearsal (two stacks in one region, a second region, delete and redeploy). Not in
# `make test`: CI runs it after (.ci/run). Nothing reaches AWS.
deploy-rehearsal: install tools localstack sam-build ## Rehearse the first deploy: real sam deploy on LocalStack (no AWS, no Docker)
	@$(BIN)/python -m pytest tests/rehearsal -m rehearsal -p no:cacheprovider || { \
		rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "error: the rehearsal collected no tests (exit 5): that is a failure here" >&2; fi; \
		exit $$rc; \
	}

# The first deploy, and every one after: what it needs is checked first (python3.13, the secrets' ARNs
# from PAYMENT_API_KEY_SECRET_ARN and WEBHOOK_SIGNING_SECRET_ARN, or saved by an earlier guided deploy),
# and what is missing is said in one line before anything is installed or AWS is called. Then the
# project's own SAM CLI builds (no container) and deploys, guided the first time (it saves the answers
# in samconfig.toml). AWS credentials come from your shell, as for the AWS CLI.
deploy: install ## Build and deploy to your AWS account (guided the first time): python3.13 and the secrets' ARNs checked first
	@args="$$($(BIN)/python scripts/deploy_preflight.py --python313 '$(PYTHON313)')"; \
	$(MAKE) tools; \
	PATH="$$(dirname "$(PYTHON313)"):$$PATH" SAM_CLI_TELEMETRY=0 $(SAM) build --no-use-container; \
	eval "set -- $$args"; \
	SAM_CLI_TELEMETRY=0 $(SAM) deploy "$$@"

demo: install ## Run the whole saga locally, duplicates and failures included (no AWS, no Docker)
	$(BIN)/saga demo

# The promise under random faults. Neither runs in `make test` (a small version of each does).
.PHONY: chaos property-long
CHAOS_ORDERS ?= 1000
CHAOS_SEED ?= 7
PROPERTY_EXAMPLES ?= 500

chaos: install ## 1,000 orders x 4 deliveries, random faults at every step, webhooks in disorder, bank debits, then the sweeper: the verdict
	$(BIN)/python -m saga_local.commands.chaos --orders $(CHAOS_ORDERS) --copies 4 --concurrency 4 --seed $(CHAOS_SEED)

property-long: install ## The property-based test with 500 examples (SAGA_PROPERTY_EXAMPLES; 25 in make test)
	SAGA_PROPERTY_EXAMPLES=$(PROPERTY_EXAMPLES) $(BIN)/python -m pytest tests/local/test_properties.py -q

# The figures, side by side in one run. stdout is JSON Lines: each benchmark is one line of the
# recipe below and prints one JSON object on one line, named by its "benchmark" key; builds, installs and
# progress go to stderr. To add a benchmark, add its line.
# Each line is also recorded (with the time, cores and load it ran on) to bench/recorded/NAME.json, the
# files docs/performance.md's figures are rendered from (`make docs-figures`): commit them with the
# docs. Three orders each way are the fewest that give the webhook timing a median and a range, and
# keep the run short on a shared machine.
BENCH_BARE_DIR := .aws-sam/bench-bare
BENCH_RECORDED := bench/recorded
.PHONY: bench
bench: ## Benchmarks, one JSON object a line: cold start as shipped, local throughput vs the bare engine, memory at 10,000 orders, moto's claim write with and without moto_speed, a missed charge resolved by webhooks vs the sweeper
	@$(MAKE) install tools sam-build >&2
	@PATH="$$(dirname "$(PYTHON313)"):$$PATH" $(SAM_ENV) $(SAM) build --template-file bench/bare/template.yaml \
		--build-dir $(BENCH_BARE_DIR) --cache-dir .aws-sam/bench-bare-cache --cached --no-use-container \
		--region us-east-1 >&2
	@$(BIN)/python bench/cold_start.py --python "$(PYTHON313)" --functions $(SAM_BUILD_DIR) --bare $(BENCH_BARE_DIR) \
		--record $(BENCH_RECORDED)/cold_start.json
	@$(BIN)/python bench/throughput.py --concurrency 1 4 --record $(BENCH_RECORDED)/throughput.json
	@$(BIN)/python bench/memory.py --orders 10000 --copies 4 --record $(BENCH_RECORDED)/memory.json
	@$(BIN)/python bench/moto_speed.py --record $(BENCH_RECORDED)/moto_speed.json
	@$(BIN)/python bench/webhook_latency.py --orders 3 --record $(BENCH_RECORDED)/webhook_latency.json

# Every interleaving of a few deliveries, the sweeper and up to 2-3 faults, the real code in
# every step (tests/model). `make test` explores the CI scopes; this explores the full ones.
.PHONY: model
model: install ## Model-check the claim protocol exhaustively on the full scopes (tests/model; CI runs small ones)
	$(BIN)/python -m tests.model --scope full

# Deliberate bugs in the code that decides money (scripts/mutants/catalogue/), each run against the
# tests meant to notice it, on a copy of the tree. Fails unless every mutant is killed or is declared
# equivalent with its reason. MUTANTS=<globs> runs some; MUTANT_JOBS=2 runs two at once.
.PHONY: mutants
MUTANTS ?=
MUTANT_JOBS ?= 1
mutants: install ## Mutation testing of claims, payments, the handlers and the ASL: the kill rate
	$(BIN)/python scripts/mutants/run.py --jobs $(MUTANT_JOBS) $(if $(MUTANTS),--only '$(MUTANTS)')

# Known vulnerabilities in what ships to Lambda (functions/requirements.txt, resolved with its
# dependencies) and in the dev environment (.venv, pinned as installed). pip-audit asks the PyPI/OSV
# advisory database over the network, which this repository's CI cannot reach: run it where the
# network allows (a laptop, a CI runner with egress). Not part of `make test`. pip-audit gets a venv
# of its own (.venv-audit), so its dependencies never mix with the project's.
AUDIT_VENV := .venv-audit
.PHONY: audit
audit: install ## pip-audit of the functions' and the dev dependencies (needs the network; not in make test)
	test -x $(AUDIT_VENV)/bin/pip-audit || { $(PYTHON) -m venv $(AUDIT_VENV) && $(AUDIT_VENV)/bin/pip install --quiet pip-audit; }
	$(AUDIT_VENV)/bin/pip-audit --strict --requirement functions/requirements.txt
	$(BIN)/python -m pip freeze --exclude-editable > $(AUDIT_VENV)/dev-requirements.txt
	$(AUDIT_VENV)/bin/pip-audit --strict --no-deps --disable-pip --requirement $(AUDIT_VENV)/dev-requirements.txt

# Best effort: a browser test skips itself without chromium, so a failed install must not fail CI.
chromium: ## Install Debian's chromium when missing (only with CI=true, as root; never fails)
	@if command -v chromium >/dev/null 2>&1; then \
		chromium --version 2>/dev/null || true; \
	elif [ "$${CI:-}" = true ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing chromium (apt-get)"; \
		{ timeout 900 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq -o DPkg::Lock::Timeout=300 chromium; } \
			|| echo "warning: chromium could not be installed; the tests that need it will skip" >&2; \
	else \
		echo "chromium: not installed; the tests that need it will skip (CI=true make chromium, as root, installs it)"; \
	fi

clean: ## Remove build output and caches (keeps the venvs and node_modules)
	rm -rf .aws-sam build dist .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage .coverage.*
	find . \( -path './.venv*' -o -path ./node_modules -o -path ./.git \) -prune -o \
		-name __pycache__ -type d -exec rm -rf {} +

clean-all: clean ## clean, and remove the venvs (.venv, .venv-sam, .venv-uv, .venv-checkov, .venv-localstack), node_modules and local stack state (.saga)
	rm -rf $(VENV) $(SAM_VENV) $(UV_VENV) .venv-checkov $(LOCALSTACK_VENV) node_modules *.egg-info .saga

# The README's and docs' figures are generated (saga_local/harness/figures.py): from `saga cost --json`,
# template.yaml and the benchmarks' runs `make bench` recorded ($(BENCH_RECORDED)/*.json) into their
# marked blocks. tests/local/test_docs_figures.py fails when one drifts.
.PHONY: docs-figures
docs-figures: install ## Rewrite the figures of README.md and docs/ from saga cost --json, template.yaml, the ASL, the code and make bench's records
	$(BIN)/python -m saga_local.harness.figures
