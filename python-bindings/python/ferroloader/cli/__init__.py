"""The tools behind the ``cli`` extra (``pip install "ferroloader[cli]"``): the ``ferroloader``
command (:mod:`~ferroloader.cli.commands`), the torchvision-against-native runs
(:mod:`~ferroloader.cli.compare`), the HTML report (:mod:`~ferroloader.cli.report`), the advisor
(:mod:`~ferroloader.cli.advisor`) and the generated sample data
(:mod:`~ferroloader.cli.sample_data`).

Importing this package checks that the extra is installed and otherwise raises one
``ImportError`` that says what to install, so no tool fails halfway with a bare
``No module named ...``. The core package (loader, transforms, datasets, profiling, torch
instrumentation, recipes, offline preparation) must never import from here: the tools build on
the core, not the reverse (``tests/test_packaging.py`` walks the imports to hold this).
This ``__init__`` must not import the tools' modules or their packages itself, so importing one
tool does not pay for the others.
"""

from __future__ import annotations

from ferroloader._extras import CLI, require

require(CLI, "ferroloader.cli (the command line, compare, report, advise, sample data)")
