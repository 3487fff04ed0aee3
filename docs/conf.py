"""Sphinx configuration of the marlparts documentation."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import marlparts  # noqa: E402

project = "marlparts"
author = "marlparts developers"
release = marlparts.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.viewcode"]
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
exclude_patterns = ["_build"]
html_theme = "alabaster"
nitpicky = False
suppress_warnings = ["ref.python"]
