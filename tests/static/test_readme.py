"""What the README promises about `make test` is what the Makefile does."""

from __future__ import annotations

import re

from saga_local.template import ROOT


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_the_readme_says_chromium_is_installed_only_with_ci_true_as_root_as_the_makefile_does() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    tests = " ".join(_section((ROOT / "README.md").read_text(encoding="utf-8"), "Tests").split())
    recipe = makefile[makefile.index("\nchromium:") :].split("\n\n")[0]

    # What the target requires before it installs anything.
    assert '"$${CI:-}" = true' in recipe
    assert '"$$(id -u)" = 0' in recipe
    assert re.search(r"chromium for the trace page test only with `CI=true` as root", tests), tests


def test_the_readme_s_sam_sync_and_integration_lines_match_samconfig_and_the_integration_tests() -> None:
    tests = _section((ROOT / "README.md").read_text(encoding="utf-8"), "Tests")
    samconfig = (ROOT / "samconfig.toml").read_text(encoding="utf-8")
    integration = (ROOT / "tests" / "integration" / "test_deployed.py").read_text(encoding="utf-8")

    assert "[default.sync.parameters]\nwatch = true" in samconfig
    assert "`sam sync` (samconfig.toml sets `watch = true`)" in " ".join(tests.split())
    assert 'os.environ.get("AWS_SAM_STACK_NAME")' in integration
    assert (
        "AWS_SAM_STACK_NAME=payment-saga .venv/bin/python -m pytest tests/integration -m integration" in tests
    )


def test_the_license_is_an_spdx_expression_so_the_first_install_prints_no_deprecation() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

    assert project["project"]["license"] == "Apache-2.0"  # a table is deprecated by setuptools 77+
    assert project["build-system"]["requires"] == ["setuptools>=77"]  # the first that reads the string
