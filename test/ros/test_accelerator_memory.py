"""Releasing accelerator memory at cleanup/shutdown (`free_accelerator_memory`, used by every
managed node) imports nothing: a node that never loaded torch (the key-frame node) must not
pay torch's import (about 4 s of CPU on the 2-core machine) to find it holds no GPU memory.
Run in fresh interpreters, so the suite's own imports do not hide an import."""

from __future__ import annotations

import subprocess
import sys

from helpers.env import REPO_ROOT

CHECK = """
import sys
from embodied_r_ros.nodes.common.managed_node import free_accelerator_memory
{before}
free_accelerator_memory()
print("torch" in sys.modules)
"""


def _run(before: str) -> str:
    done = subprocess.run([sys.executable, "-c", CHECK.format(before=before)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_a_process_without_torch_does_not_import_it() -> None:
    assert _run("") == "False"


def test_a_process_with_torch_releases_through_it() -> None:
    assert _run("import torch") == "True"


def test_models_made_while_start_up_was_frozen_are_still_collected() -> None:
    # run_node freezes what start-up made (the models included) so that later collections
    # skip it; releasing must thaw it, or a model held in a reference cycle would never
    # be freed by a cleanup transition.
    done = subprocess.run([sys.executable, "-c", """
import gc, weakref
from embodied_r_ros.nodes.common.managed_node import free_accelerator_memory
class Model:
    pass
model = Model()
model.self_ref = model  # a cycle: only the collector frees it
alive = weakref.ref(model)
gc.freeze()
del model
gc.collect()
print(alive() is not None)  # frozen: an ordinary collection leaves it
free_accelerator_memory()
print(alive() is None, gc.get_freeze_count() > 0)  # freed; the rest frozen again
"""], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "True", "True"]
