"""scripts/check_layers.py: no import circle in Python, no include that runs back up a layer in C++."""

import importlib.util
import os
import sys
import textwrap


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SCRIPT = os.path.join(ROOT, "scripts", "check_layers.py")
_spec = importlib.util.spec_from_file_location("check_layers", _SCRIPT)
check_layers = importlib.util.module_from_spec(_spec)
sys.modules["check_layers"] = check_layers  # its dataclass looks its module up
_spec.loader.exec_module(check_layers)


def _write(root, files):
    for path, text in files.items():
        full = root / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(textwrap.dedent(text))


def test_the_tree_keeps_its_layers(capsys):
    rc = check_layers.main(["--explain"])
    assert rc == 0, capsys.readouterr().out


def test_every_layer_entry_names_files():
    stale = check_layers.stale_layer_entries(ROOT)
    assert not stale, f"LAYERS in scripts/check_layers.py names folders that hold no file: {stale}"


def test_every_cpp_file_is_in_a_layer():
    unplaced = [p for p in check_layers.cpp_files(ROOT)
                if not check_layers.is_test(p) and check_layers.layer_of(p) is None]
    assert not unplaced, f"add their folders to LAYERS in scripts/check_layers.py: {unplaced}"


def test_a_module_level_circle_is_found_with_its_edges(tmp_path):
    _write(tmp_path, {
        "tfx_dist/__init__.py": "",
        "tfx_dist/a.py": "from tfx_dist import b\n",
        "tfx_dist/b.py": "import tfx_dist.a\n",
        "tfx_dist/c.py": "from . import a\n",
    })
    problems = check_layers.check_python(str(tmp_path), explain=True)
    assert len(problems) == 1
    assert "module-level import circle among tfx_dist.a, tfx_dist.b" in problems[0]
    assert "tfx_dist/a.py:1, at module level" in problems[0]


def test_a_lazy_circle_counts_unless_allowed(tmp_path, monkeypatch):
    _write(tmp_path, {
        "tfx_dist/__init__.py": "",
        "tfx_dist/pkg/__init__.py": "from .low import x\n",
        "tfx_dist/pkg/low.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from tfx_dist import high  # never runs: not an edge
            def x():
                from tfx_dist.high import y
                return y
        """,
        "tfx_dist/high.py": "from tfx_dist.pkg import low\ny = 1\n",
    })
    problems = check_layers.check_python(str(tmp_path), explain=False)
    assert problems == ["python: import circle closed by a lazy import among tfx_dist.high, "
                        "tfx_dist.pkg.low"]
    monkeypatch.setattr(check_layers, "ALLOWED_LAZY_EDGES",
                        {("tfx_dist.pkg.low", "tfx_dist.high"): "a reason"})
    assert check_layers.check_python(str(tmp_path), explain=False) == []


def test_a_confined_package_imports_only_what_it_may(tmp_path):
    _write(tmp_path, {
        "tfx_dist/__init__.py": "",
        "tfx_dist/settings.py": "",
        "tfx_dist/comm.py": "",
        "tfx_dist/cluster/__init__.py": "from tfx_dist import settings\nfrom . import spec\n",
        "tfx_dist/cluster/spec.py": "def f():\n    import tfx_dist.comm\n",
    })
    problems = check_layers.check_python(str(tmp_path), explain=False)
    assert problems == ["python: tfx_dist/cluster/spec.py:2: tfx_dist.cluster may import only "
                        "tfx_dist.cluster, tfx_dist.settings, not tfx_dist.comm"]


def test_an_include_up_a_layer_is_named_by_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setattr(check_layers, "LAYERS", (
        ("low", ("custom_ops/lib/low",)),
        ("high", ("custom_ops/lib/high", "custom_ops/lib/top")),
        ("gone", ("custom_ops/lib/moved_away",)),
    ))
    _write(tmp_path, {
        "custom_ops/lib/low/a.h": '#include <vector>\n#include "custom_ops/lib/low/b.h"\n',
        "custom_ops/lib/low/b.h": '#include "tensorflow/core/x.h"\n\n#include "custom_ops/lib/top.h"\n',
        "custom_ops/lib/top.h": '#include "custom_ops/lib/low/a.h"\n',
        "custom_ops/lib/high/c.cc": '#include "custom_ops/lib/low/a.h"\n',
        "custom_ops/lib/top_parts.cc": '#include "custom_ops/lib/top.h"\n',  # a stem extending top
        "custom_ops/lib/tests/c_test.cc": '#include "custom_ops/lib/top.h"\n',
        "custom_ops/lib/stray.cc": "",
    })
    problems = check_layers.check_cpp(str(tmp_path), explain=False)
    assert sorted(problems) == [
        "c++: LAYERS entry custom_ops/lib/moved_away matches no file (moved? edit the table in "
        "scripts/check_layers.py)",
        "c++: custom_ops/lib/low/b.h:3: includes custom_ops/lib/top.h, which runs back up from "
        "'low' to 'high'",
        "c++: custom_ops/lib/stray.cc: in no layer (add its folder to LAYERS in scripts/check_layers.py)",
    ]
