"""Tests of layersearch.evaluation.plots: valid PNGs, mask colours, best-so-far direction, errors, atomic writes."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import optuna
import pytest

from layersearch.evaluation import plots
from layersearch.common.errors import LayersearchError
from layersearch.masks.mask import ModelInfo, SkipMask

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
BINARY = optuna.distributions.IntDistribution(0, 1)

optuna.logging.set_verbosity(optuna.logging.WARNING)


# ----- helpers ------------------------------------------------------------------------------
def make_study(tmp_path: Path, name: str, values: list[float], direction: str = "minimize",
               layers: int = 4) -> optuna.Study:
    """A sqlite study following the layersearch conventions, trials 10 s apart."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path}/{name}.db", study_name=name,
                                direction=direction)
    study.set_user_attr("settings", {"model": "tiny", "domain": "gsm8k", "strategy": "tpe",
                                     "objective": "time-per-token", "skip_ratio": 0.25})
    base = dt.datetime(2025, 1, 1, 12, 0, 0)
    for i, value in enumerate(values):
        mask = SkipMask(layers, attention=(i % layers,), mlp=((i + 1) % layers,))
        trial = optuna.trial.create_trial(
            params=mask_params(mask), distributions={k: BINARY for k in mask_params(mask)},
            value=value, user_attrs={"mask": mask.short_string(), "M": 2.0 + i, "alpha": 0.5,
                                     "skip_ratio": mask.skip_ratio, "tokens_per_second": 30.0})
        trial.datetime_start = base + dt.timedelta(seconds=10 * i)
        trial.datetime_complete = base + dt.timedelta(seconds=10 * i + 8)
        study.add_trial(trial)
    return study


def mask_params(mask: SkipMask) -> dict[str, int]:
    """Trial params ``attn_00, mlp_00, ...`` (1 = skipped) of ``mask``."""
    params = {}
    for layer in range(mask.num_layers):
        params[f"attn_{layer:02d}"] = int(layer in mask.attention)
        params[f"mlp_{layer:02d}"] = int(layer in mask.mlp)
    return params


def read_png(path: Path) -> np.ndarray:
    """Check the file is a non-empty PNG and return its RGB pixels as 0..255 integers."""
    import matplotlib.image

    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    image = matplotlib.image.imread(str(path))
    assert image.ndim == 3 and image.shape[0] > 0 and image.shape[1] > 0
    return (image[..., :3] * 255).round().astype(int)


def has_colour(pixels: np.ndarray, hex_colour: str, tolerance: int = 12) -> bool:
    """True when some pixel is within ``tolerance`` of ``hex_colour`` in every channel."""
    target = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
    return bool((np.abs(pixels - target).max(axis=-1) <= tolerance).any())


def no_temp_files(folder: Path) -> bool:
    return not folder.exists() or not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


# ----- plot_mask ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("attention", "mlp", "red", "blue"),
    [((3, 7), (), True, False), ((), (1, 14), False, True), ((0,), (15,), True, True), ((), (), False, False)],
)
def test_plot_mask_colours_follow_skipped_sublayers(tmp_path, attention, mlp, red, blue):
    mask = SkipMask(16, attention, mlp)
    out = plots.plot_mask(mask, tmp_path / "mask.png")
    pixels = read_png(out)
    assert has_colour(pixels, plots.ATTENTION_COLOUR) is red
    assert has_colour(pixels, plots.MLP_COLOUR) is blue
    assert has_colour(pixels, plots.KEPT_COLOUR)


def count_colour(pixels: np.ndarray, hex_colour: str, tolerance: int = 2) -> int:
    target = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(pixels - target).max(axis=-1) <= tolerance).sum())


def test_plot_mask_everything_skipped_has_no_grey_squares(tmp_path):
    every = read_png(plots.plot_mask(SkipMask.everything(8), tmp_path / "all.png"))
    none = read_png(plots.plot_mask(SkipMask.none(8), tmp_path / "none.png"))
    assert has_colour(every, plots.ATTENTION_COLOUR) and has_colour(every, plots.MLP_COLOUR)
    # Anti-aliased text has a few grey pixels; squares have thousands.
    assert count_colour(every, plots.KEPT_COLOUR) < count_colour(none, plots.KEPT_COLOUR) / 50


def test_plot_mask_draws_int4_sub_layers_in_their_own_colour(tmp_path):
    plan = SkipMask(8, (1,), ()).with_int8((0,), (), False).with_int4((2, 3), (0, 1, 2), True)
    pixels = read_png(plots.plot_mask(plan, tmp_path / "plan.png"))
    assert has_colour(pixels, plots.INT4_COLOUR) and has_colour(pixels, plots.INT8_COLOUR)
    title = plots._mask_title(plan)
    assert "1 sub-layers int8" in title and "5 sub-layers int4" in title and "LM head int4" in title
    assert not has_colour(read_png(plots.plot_mask(SkipMask(8, (1,), ()), tmp_path / "skips.png")), plots.INT4_COLOUR)


def test_plot_mask_title_names_model_and_ratio():
    model = ModelInfo("SmolLM2-135M", 30, 576, "abc")
    title = plots._mask_title(SkipMask(30, (1, 2, 3), (4, 5, 6), model))
    assert "SmolLM2-135M" in title and "0.10" in title and "6 of 60" in title


def test_plot_mask_returns_path_and_never_creates_folders(tmp_path):
    out = tmp_path / "m.png"
    assert plots.plot_mask(SkipMask.uniform(32, 0.4), out, title="custom") == out
    read_png(out)
    with pytest.raises(LayersearchError, match="does not exist"):  # --out alike in every command
        plots.plot_mask(SkipMask.uniform(32, 0.4), tmp_path / "deep" / "er" / "m.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.png"]


# ----- best_so_far --------------------------------------------------------------------------
def test_best_so_far_minimize_and_maximize():
    values = [3.0, 1.0, 2.0, 0.5, 4.0]
    assert plots.best_so_far(values, "minimize") == [3.0, 1.0, 1.0, 0.5, 0.5]
    assert plots.best_so_far(values, "maximize") == [3.0, 3.0, 3.0, 3.0, 4.0]


def test_best_so_far_accepts_study_direction_and_skips_nan():
    from optuna.study import StudyDirection

    values = [float("nan"), 2.0, float("nan"), 1.0]
    best = plots.best_so_far(values, StudyDirection.MINIMIZE)
    assert np.isnan(best[0]) and best[1:] == [2.0, 2.0, 1.0]
    assert plots.best_so_far([1.0, 5.0], StudyDirection.MAXIMIZE) == [1.0, 5.0]
    assert plots.best_so_far([], "minimize") == []


def test_best_so_far_rejects_unknown_direction():
    with pytest.raises(LayersearchError, match="direction"):
        plots.best_so_far([1.0], "sideways")


# ----- plot_history / plot_compare ----------------------------------------------------------
@pytest.mark.parametrize("direction", ["minimize", "maximize"])
def test_plot_history_writes_png(tmp_path, direction):
    study = make_study(tmp_path, f"hist-{direction}", [5.0, 3.0, 4.0, 1.0, 2.0], direction)
    read_png(plots.plot_history(study, tmp_path / "history.png"))


def test_history_series_uses_wall_clock_since_first_start(tmp_path):
    study = make_study(tmp_path, "clock", [5.0, 3.0, 4.0])
    seconds, best, label = plots._best_series(study)
    assert seconds == [8.0, 18.0, 28.0]
    assert best == [5.0, 3.0, 3.0]
    assert "seconds" in label


def test_plot_compare_writes_png(tmp_path):
    a = make_study(tmp_path, "a", [5.0, 3.0, 4.0, 1.0])
    b = make_study(tmp_path, "b", [4.0, 4.5, 2.0])
    out = plots.plot_compare([a, b], tmp_path / "cmp.png", labels=["tpe", "random"])
    read_png(out)


def test_empty_study_is_an_error(tmp_path):
    empty = make_study(tmp_path, "x", [])
    full = make_study(tmp_path, "full", [1.0])
    with pytest.raises(LayersearchError, match="study 'x' has no completed trial"):
        plots.plot_history(empty, tmp_path / "h.png")
    with pytest.raises(LayersearchError, match="study 'x' has no completed trial"):
        plots.plot_compare([full, empty], tmp_path / "c.png")
    assert not (tmp_path / "h.png").exists() and not (tmp_path / "c.png").exists()


def test_plot_compare_argument_errors(tmp_path):
    study = make_study(tmp_path, "s", [1.0])
    with pytest.raises(LayersearchError, match="no study"):
        plots.plot_compare([], tmp_path / "c.png")
    with pytest.raises(LayersearchError, match="2 labels for 1 studies"):
        plots.plot_compare([study], tmp_path / "c.png", labels=["a", "b"])


# ----- atomic writes and paths --------------------------------------------------------------
def test_failed_save_leaves_no_file(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def broken_savefig(self, fname, *args, **kwargs):
        # a partial write before the failure (to a file, or to the buffer the PNG is rendered in)
        fname.write(PNG_SIGNATURE) if hasattr(fname, "write") else Path(fname).write_bytes(PNG_SIGNATURE)
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    out = tmp_path / "plots" / "mask.png"
    out.parent.mkdir()
    with pytest.raises(OSError, match="disk full"):
        plots.plot_mask(SkipMask(4, (1,), (2,)), out)
    assert not out.exists()
    assert no_temp_files(out.parent)


def test_failed_save_keeps_previous_file(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    out = plots.plot_mask(SkipMask(4, (1,), ()), tmp_path / "mask.png")
    before = out.read_bytes()
    monkeypatch.setattr(Figure, "savefig", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError):
        plots.plot_mask(SkipMask(4, (), (2,)), out)
    assert out.read_bytes() == before
    assert no_temp_files(tmp_path)


def test_default_plot_path():
    assert plots.default_plot_path("mask", "llama-gsm8k") == Path("plots/mask-llama-gsm8k.png")
    assert plots.default_plot_path("history", "a/b c") == Path("plots/history-a_b_c.png")
    with pytest.raises(LayersearchError):
        plots.default_plot_path("", "x")
