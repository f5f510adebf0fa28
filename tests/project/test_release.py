"""What a release promises outside the code: one version number, the distribution's name in the README's
install lines, a dated changelog entry for the version, and a README walk that scripts/first_five_minutes.py
can run (the walk itself runs in CI against the installed wheel: scripts/test_wheel.sh)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from importlib import metadata

import pytest

import apic
from persist_helpers import REPO

pytestmark = [pytest.mark.install]

ROOT = REPO


def _read(name: str) -> str:
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:
        return f.read()


def _distribution() -> str:
    return re.search(r'^name = "([^"]+)"', _read("pyproject.toml"), flags=re.M).group(1)


def test_the_version_has_one_source():
    pyproject = _read("pyproject.toml")
    project = pyproject.split("[project]", 1)[1].split("\n[", 1)[0]
    assert not re.search(r"^version\s*=", project, flags=re.M), "a literal version in pyproject.toml: it is dynamic"
    assert re.search(r'^dynamic = \["version"\]', project, flags=re.M)
    assert 'version = { attr = "apic._version.__version__" }' in pyproject


@pytest.mark.skipif(not os.environ.get("APIC_TEST_INSTALLED"),
                    reason="checks an installed wheel: scripts/test_wheel.sh")
def test_the_installed_distribution_has_that_version():
    assert metadata.version(_distribution()) == apic.__version__


def test_the_license_text_is_the_license_the_metadata_names():
    pyproject = _read("pyproject.toml")
    assert re.search(r'^license = "Apache-2.0"$', pyproject, flags=re.M)
    assert re.search(r'^license-files = \["LICENSE"\]', pyproject, flags=re.M)
    text = _read("LICENSE")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


@pytest.mark.skipif(not os.environ.get("APIC_TEST_INSTALLED"),
                    reason="checks an installed wheel: scripts/test_wheel.sh")
def test_the_installed_distribution_carries_the_license():
    files = [str(f) for f in metadata.files(_distribution()) or ()]
    assert any(f.endswith("licenses/LICENSE") for f in files), files


def test_cli_version():
    done = subprocess.run([sys.executable, "-m", "apic", "--version"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"apic {apic.__version__} (warp-lang "), done.stdout


def test_readme_installs_the_distribution_with_every_extra():
    readme, name = _read("README.md"), _distribution()
    assert name != "apic", "'apic' on the package index is another project"
    assert f"\npip install {name} " in readme
    optional = _read("pyproject.toml").split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    extras = re.findall(r"^(\w+) = \[", optional,
                        flags=re.M)
    assert sorted(extras) == ["cuda", "docs", "plot", "ray", "test"]
    for extra in extras:
        assert f'pip install "{name}[{extra}]"' in readme, extra


@pytest.mark.skipif(not os.environ.get("APIC_TEST_INSTALLED"),
                    reason="checks an installed wheel: scripts/test_wheel.sh")
def test_the_installed_package_is_typed():
    """PEP 561: the wheel carries apic/py.typed, so type checkers read apic's annotations."""
    files = [str(f).replace(os.sep, "/") for f in metadata.files(_distribution()) or ()]
    assert "apic/py.typed" in files, files
    assert os.path.isfile(os.path.join(os.path.dirname(apic.__file__), "py.typed"))


def test_changelog_has_a_dated_entry_for_this_version_and_links_the_promise():
    changelog = _read("CHANGELOG.md")
    assert re.search(rf"^## {re.escape(apic.__version__)} - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, flags=re.M)
    assert "docs/FORMAT.md#61-compatibility-promise" in changelog
    assert "\n### 6.1 Compatibility promise\n" in _read("docs/FORMAT.md")  # the anchor the link names


def test_the_readme_walk_is_runnable():
    """Every command of the README's first five minutes has the checks the walk script applies."""
    path = os.path.join(ROOT, "scripts", "first_five_minutes.py")
    spec = importlib.util.spec_from_file_location("first_five_minutes", path)
    walk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(walk)
    python, commands = walk.readme_walk()
    assert "wp.capture_save(" in python
    assert commands and commands[0] == "python -m apic demo"
    for command in commands:
        walk.expectation(command)  # raises SystemExit for a command without one
