"""Sphinx configuration: the markdown pages of docs/ (MyST) and an API reference from apic's docstrings.

Built by scripts/docs.sh (``sphinx-build -W --keep-going``: every warning fails the build, in CI too).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the checkout's apic

import apic  # noqa: E402  (after the path: the version comes from the package documented)

project = "apic"
author = "apic contributors"
copyright = "apic contributors, Apache-2.0"
release = apic.__version__
version = release

extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# The source folder is the repository's root (scripts/docs.sh: ``sphinx-build -c docs . OUT``), so that the
# pages' links to the README, the changelog and the benchmarks' figures are links Sphinx checks and follows;
# only these pages are read.
root_doc = "docs/index"
include_patterns = [
    "README.md", "CHANGELOG.md", "benchmarks/README.md", "tests/README.md", "docs/*.md", "docs/*.rst",
]
exclude_patterns = ["docs/_build", ".*", "apic", "scripts", "examples", "build", "dist", "*.egg-info"]

# Sections of the markdown pages get GitHub's anchors (FORMAT.md#61-compatibility-promise), so that a link
# reads the same on GitHub and here.
myst_heading_anchors = 4

autodoc_member_order = "bysource"
autodoc_typehints = "description"  # annotations beside the parameters they type, not in long signatures
autodoc_typehints_description_target = "documented_params"  # an undocumented parameter gets no bare type line
autodoc_default_options = {"show-inheritance": True}
# Ray is an optional extra (apic-warp[ray]): apic.ray's page is built without it installed.
autodoc_mock_imports = ["ray"]
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "alabaster"
html_title = f"apic {release}"
