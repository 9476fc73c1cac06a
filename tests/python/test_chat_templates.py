"""The chat-template fixture of the embedded engine (issue 45) against
Hugging Face transformers itself: every (template, conversation) pair of
crates/svc-engine-llama/tests/templates is rendered again with
`apply_chat_template`, and must equal expected.json, the outputs svc's
renderer is held to byte for byte (crates/svc-engine-llama/tests/templates.rs).
So the fixture cannot drift from transformers.

Needs no svc server, and transformers without torch (requirements.txt pins
the version expected.json was made with); skipped where it is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).resolve().parents[2] / "crates" / "svc-engine-llama" / "tests" / "templates"

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("jinja2") is None,
    reason="transformers or jinja2 is not installed",
)


@pytest.fixture(scope="module")
def render():
    """render.py of the fixture, as a module."""
    spec = importlib.util.spec_from_file_location("render_chat_templates", FIXTURE / "render.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered(render):
    return render.render_all(render.load_fixture())


@pytest.fixture(scope="module")
def expected():
    return json.loads((FIXTURE / "expected.json").read_text(encoding="utf-8"))


def test_fixture_keys_are_sorted(render):
    render.check_sorted_keys(render.load_fixture())


def test_every_pair_renders_as_committed(rendered, expected):
    assert rendered["pairs"].keys() == expected["pairs"].keys()
    different = []
    for template, pairs in expected["pairs"].items():
        assert rendered["pairs"][template].keys() == pairs.keys(), template
        for conversation, want in pairs.items():
            if rendered["pairs"][template][conversation] != want:
                different.append(f"{template} × {conversation}")
    assert not different, (
        f"transformers {rendered['transformers']} renders these pairs differently from expected.json "
        f"(made with {expected['transformers']}): {different}"
    )


def test_known_differences_name_real_pairs(render, expected):
    for difference in render.load_fixture()["known_differences"]:
        assert difference["reason"], difference
        for conversation in difference["conversations"]:
            assert conversation in expected["pairs"][difference["template"]], difference
